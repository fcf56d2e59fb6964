import FoundationEssentials
import Synchronization

/// A response read as server-sent events (`text/event-stream`) while it arrives: ``events()``
/// yields each ``ServerSentEvent`` as soon as its blank line is received, for streaming APIs
/// (token streams, notifications, logs).
///
/// ```swift
/// struct Prompt: Encodable, Sendable {
///     var prompt: String
///     var stream = true
/// }
///
/// final class Completions: Component, POSTRequestType, JSONBodyRequestType, ValidatedResponseType,
///     NonAutoRetryType, EventStreamResponseType
/// {
///     let prompt: String
///     var urlString: String { "https://api.example.com/v1/completions" }
///     var headers: [String: String] { ["Accept": "text/event-stream"] }
///     var jsonBody: Prompt? { Prompt(prompt: prompt) }
///     init(prompt: String) {
///         self.prompt = prompt
///         super.init()
///     }
/// }
///
/// for try await event in Completions(prompt: "Hello").events() {
///     print(event.data)
/// }
/// ```
///
/// The body is parsed on the transport's thread as it arrives and never collected. Leaving the
/// loop early (or cancelling its task) cancels the request. The sequence ends when the response
/// ends, and throws the request's ``BrickError`` when it fails. The body of a response that is
/// not a success (2xx) is never parsed as events: a status refused by validation
/// (``ValidatedResponseType``) ends the sequence with an error that keeps that body (up to
/// 64 KiB) in ``BrickError/responseBody``.
///
/// With retries (``AutoRetryType``), a stream that breaks off (the connection drops mid-stream)
/// is reconnected by the retry, which sends `Last-Event-ID` with the last event ID received, so a
/// server that keeps IDs continues after it; an unfinished event of the broken response is
/// dropped. A server that ignores `Last-Event-ID`, or events without IDs, replay from the first:
/// give such streams ``NonAutoRetryType``. Run with `response(_:)`, `response()` or `value`
/// instead, the body is kept in memory and not parsed.
public protocol EventStreamResponseType: ResponseType where SerializedObject == Empty {}

extension EventStreamResponseType {
    /// ``EmptyResponseSerializer``: the events are the result.
    public var responseSerializer: any ResponseSerializer<Empty> { EmptyResponseSerializer() }
}

extension EventStreamResponseType where Self: Component {
    /// The event parser's stream while ``events()`` runs the request; memory otherwise.
    public var responseDestination: TransportRequest.ResponseDestination {
        eventSink.map { .stream($0.stream) } ?? .memory
    }

    /// Starts the request and yields its events as they arrive. A request runs once: call this
    /// instead of ``RequestType/resume()``; on a request that already ran or was cancelled, the
    /// sequence throws ``BrickError/cancelled`` at once.
    ///
    /// - Returns: The events; the sequence throws the request's ``BrickError`` if it fails.
    public func events() -> ServerSentEventStream {
        let buffer = EventBuffer()
        guard lifecycle.state == .waiting else {
            // `resume()` would ignore it, and nothing would ever end the sequence.
            buffer.finish(throwing: BrickError(.cancelled, message: "the request already ran or was cancelled"))
            return ServerSentEventStream(buffer: buffer)
        }
        let sink = EventSink(buffer)
        eventSink = sink
        let lifecycle = self.lifecycle
        buffer.onConsumerGone { _ = lifecycle.cancel() }
        response { response in
            guard var error = response.error else {
                buffer.finish(throwing: nil)
                return
            }
            if let failure = sink.failure {
                // The sink stopped the transfer: its reason, not "cancelled".
                error = failure
            } else if error.responseBody == nil, let document = sink.errorDocument {
                // A response refused by validation: its body (kept by the sink, not parsed) goes
                // with the error, as it does for a body kept in memory.
                error = BrickError(
                    error.code,
                    message: error.message,
                    underlying: error.underlying,
                    status: error.status,
                    responseBody: document
                )
            }
            buffer.finish(throwing: error)
        }
        .resume()
        eventSink = nil
        return ServerSentEventStream(buffer: buffer)
    }
}

/// The events of an ``EventStreamResponseType`` request, as they arrive: what
/// ``EventStreamResponseType/events()`` returns, iterated once with `for try await`.
///
/// The sequence holds at most about 1 MiB (or 512 events) that the loop has not taken yet: past
/// that the transfer pauses (libcurl stops reading the connection, so the server's sends block)
/// and resumes once the loop has taken half of them. A slow consumer therefore costs memory
/// bounded by that, not by how far the server is ahead. Leaving the loop early, or dropping the
/// sequence without iterating it, cancels the request; cancelling the task that iterates ends the
/// loop (and the request) the same way.
public struct ServerSentEventStream: AsyncSequence, Sendable {
    /// Each element is an event.
    public typealias Element = ServerSentEvent

    private let owner: Owner

    init(buffer: EventBuffer) {
        owner = Owner(buffer)
    }

    /// How many events have arrived that the loop has not taken yet (for tests and diagnostics).
    package var bufferedEventCount: Int { owner.buffer.count }

    /// Makes the one iterator of this sequence.
    ///
    /// - Returns: The iterator.
    public func makeAsyncIterator() -> Iterator {
        Iterator(owner: owner)
    }

    /// Takes the events in order, waiting for the next one to arrive.
    public struct Iterator: AsyncIteratorProtocol {
        fileprivate let owner: Owner

        /// The next event, `nil` when the response ended (or the task was cancelled).
        ///
        /// - Returns: The event.
        /// - Throws: The request's ``BrickError`` when it failed.
        public mutating func next() async throws -> ServerSentEvent? {
            try await owner.buffer.next()
        }
    }

    /// Ends the request when the last holder of the sequence or its iterator lets go of it.
    fileprivate final class Owner: Sendable {
        let buffer: EventBuffer
        init(_ buffer: EventBuffer) { self.buffer = buffer }
        deinit { buffer.consumerLeft() }
    }
}

/// The events parsed and not yet taken by the consumer, bounded: the producer (the transport's
/// thread) is told to pause past the high-water mark and resumed at half of it. One consumer.
final class EventBuffer: Sendable {
    static let maxBufferedBytes = 1 << 20
    static let maxBufferedEvents = 512

    private struct State {
        var events: [ServerSentEvent] = []
        var head = 0
        var bytes = 0
        /// The end of the sequence: `nil` while events may still come; an error to throw, or
        /// `.none` inside for a normal end.
        var end: Optional<(any Error)?> = nil
        var waiter: CheckedContinuation<ServerSentEvent?, any Error>?
        var paused = false
        var consumerGone = false
        var count: Int { events.count - head }
    }

    private let state = Lock(State())
    /// How the producer is resumed after a pause; how the request is cancelled when the consumer goes.
    private let hooks = Lock<(resume: (@Sendable () -> Void)?, gone: (@Sendable () -> Void)?)>((nil, nil))

    /// Events held, not yet taken.
    var count: Int { state.withLock { $0.count } }

    func onResume(_ resume: @escaping @Sendable () -> Void) { hooks.withLock { $0.resume = resume } }
    func onConsumerGone(_ gone: @escaping @Sendable () -> Void) { hooks.withLock { $0.gone = gone } }

    private static func size(of event: ServerSentEvent) -> Int {
        event.data.utf8.count + event.type.utf8.count + (event.id?.utf8.count ?? 0) + 64
    }

    /// The producer adds events; returns whether it may go on (``ResponseBodyStream/Demand``).
    func push(_ events: [ServerSentEvent]) -> ResponseBodyStream.Demand {
        guard !events.isEmpty else {
            return state.withLock { $0.consumerGone ? .stop : ($0.paused ? .pause : .more) }
        }
        let (waiter, first, demand) = state.withLock {
            state -> (CheckedContinuation<ServerSentEvent?, any Error>?, ServerSentEvent?, ResponseBodyStream.Demand) in
            if state.consumerGone || state.end != nil { return (nil, nil, .stop) }
            var rest = events[...]
            var handed: ServerSentEvent?
            let waiter = state.waiter
            if waiter != nil {
                state.waiter = nil
                handed = rest.removeFirst()
            }
            for event in rest {
                state.events.append(event)
                state.bytes += Self.size(of: event)
            }
            if state.bytes >= Self.maxBufferedBytes || state.count >= Self.maxBufferedEvents { state.paused = true }
            return (waiter, handed, state.paused ? .pause : .more)
        }
        waiter?.resume(returning: first)
        return demand
    }

    /// The producer is done: the sequence ends after the events still held (with `error`, if any).
    func finish(throwing error: (any Error)?) {
        let waiter = state.withLock { state -> CheckedContinuation<ServerSentEvent?, any Error>? in
            guard state.end == nil else { return nil }
            state.end = .some(error)
            defer { state.waiter = nil }
            return state.waiter
        }
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }

    /// The consumer takes the next event, waiting for one.
    func next() async throws -> ServerSentEvent? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                enum Step { case event(ServerSentEvent, resume: Bool), end((any Error)?), wait }
                let step = state.withLock { state -> Step in
                    if state.count > 0 {
                        let event = state.events[state.head]
                        state.head += 1
                        state.bytes -= Self.size(of: event)
                        if state.head == state.events.count {
                            state.events.removeAll(keepingCapacity: true)
                            state.head = 0
                        } else if state.head >= 64 && state.head * 2 >= state.events.count {
                            state.events.removeFirst(state.head)
                            state.head = 0
                        }
                        var resume = false
                        if state.paused && state.bytes <= Self.maxBufferedBytes / 2
                            && state.count <= Self.maxBufferedEvents / 2
                        {
                            state.paused = false
                            resume = true
                        }
                        return .event(event, resume: resume)
                    }
                    if let end = state.end { return .end(end) }
                    if Task.isCancelled {
                        state.end = .some(nil)
                        return .end(nil)
                    }
                    state.waiter = continuation
                    return .wait
                }
                switch step {
                case .event(let event, let resume):
                    if resume { hooks.withLock { $0.resume }?() }
                    continuation.resume(returning: event)
                case .end(let error?):
                    continuation.resume(throwing: error)
                case .end(nil):
                    continuation.resume(returning: nil)
                case .wait:
                    break
                }
            }
        } onCancel: {
            // As an `AsyncThrowingStream` does: the loop ends, and so does the request.
            finish(throwing: nil)
            consumerLeft()
        }
    }

    /// The consumer stopped iterating (or never started): the request is cancelled.
    func consumerLeft() {
        let first = state.withLock { state -> Bool in
            defer { state.consumerGone = true }
            return !state.consumerGone
        }
        if first { hooks.withLock { $0.gone }?() }
    }
}

/// Parses a request's body into events and hands them to the consumer's buffer, on the
/// transport's thread. The body of a response that is not a success (not 2xx) is kept instead, up
/// to 64 KiB: it is an error document, not events.
final class EventSink: Sendable {
    private struct State {
        var parser = ServerSentEventParser()
        var isSuccess = true
        var errorDocument: Data?
        var failure: BrickError?
    }

    /// The parser's state, shared by the sink and its stream's closures.
    private final class Shared: Sendable {
        let state = Lock(State())
    }

    private static let errorDocumentLimit = 64 * 1024
    private let shared = Shared()
    private let buffer: EventBuffer
    /// The body's destination: paced by the buffer.
    let stream: ResponseBodyStream

    init(_ buffer: EventBuffer) {
        self.buffer = buffer
        let shared = self.shared
        stream = ResponseBodyStream(
            onResponse: { status, _ in
                shared.state.withLock { state in
                    // Each attempt's response is a new stream, continued after the last event.
                    state.parser.reconnected()
                    state.isSuccess = (200..<300).contains(status.code)
                }
                return true
            },
            retryHeaders: {
                let id = shared.state.withLock { $0.parser.lastEventID }
                return id.isEmpty ? [] : [("Last-Event-ID", id)]
            },
            paced: { bytes in EventSink.receive(bytes, shared: shared, buffer: buffer) }
        )
        let stream = self.stream
        buffer.onResume { [weak stream] in stream?.resumeDelivery() }
    }

    /// The body of a response that was not a success, if one arrived.
    var errorDocument: Data? { shared.state.withLock { $0.errorDocument } }

    /// Why the sink stopped the transfer, if it did (an event over the parser's limit).
    var failure: BrickError? { shared.state.withLock { $0.failure } }

    private static func receive(
        _ bytes: UnsafeRawBufferPointer,
        shared: Shared,
        buffer: EventBuffer
    ) -> ResponseBodyStream.Demand {
        let events = shared.state.withLock { state -> [ServerSentEvent]? in
            guard state.isSuccess else {
                var document = state.errorDocument ?? Data()
                document.append(contentsOf: bytes.prefix(max(Self.errorDocumentLimit - document.count, 0)))
                state.errorDocument = document
                return []
            }
            let events = state.parser.parse(bytes)
            if state.parser.exceededLimit {
                state.failure = BrickError(
                    .invalidResponse,
                    message: "the server sent an event or line longer than \(state.parser.maxEventSize) bytes"
                )
                return nil
            }
            return events
        }
        guard let events else { return .stop }
        return buffer.push(events)
    }
}
