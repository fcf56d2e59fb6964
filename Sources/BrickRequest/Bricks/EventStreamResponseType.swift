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
///     var jsonBody: (any Encodable & Sendable)? { Prompt(prompt: prompt) }
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
    public func events() -> AsyncThrowingStream<ServerSentEvent, any Error> {
        let (events, continuation) = AsyncThrowingStream<ServerSentEvent, any Error>.makeStream()
        guard lifecycle.state == .waiting else {
            // `resume()` would ignore it, and nothing would ever end the sequence.
            continuation.finish(throwing: BrickError(.cancelled, message: "the request already ran or was cancelled"))
            return events
        }
        let sink = EventSink(continuation)
        eventSink = sink
        let lifecycle = self.lifecycle
        continuation.onTermination = { termination in
            if case .cancelled = termination { _ = lifecycle.cancel() }
        }
        response { response in
            guard var error = response.error else {
                continuation.finish()
                return
            }
            // A response refused by validation: its body (kept by the sink, not parsed) goes with
            // the error, as it does for a body kept in memory.
            if error.responseBody == nil, let document = sink.errorDocument {
                error = BrickError(
                    error.code,
                    message: error.message,
                    underlying: error.underlying,
                    status: error.status,
                    responseBody: document
                )
            }
            continuation.finish(throwing: error)
        }
        .resume()
        eventSink = nil
        return events
    }
}

/// Parses a request's body into events and yields them, on the transport's thread. The body of
/// a response that is not a success (not 2xx) is kept instead, up to 64 KiB: it is an error
/// document, not events.
final class EventSink: Sendable {
    private struct State {
        var parser = ServerSentEventParser()
        var isSuccess = true
        var errorDocument: Data?
    }

    private static let errorDocumentLimit = 64 * 1024
    private let state = Lock(State())
    private let continuation: AsyncThrowingStream<ServerSentEvent, any Error>.Continuation

    init(_ continuation: AsyncThrowingStream<ServerSentEvent, any Error>.Continuation) {
        self.continuation = continuation
    }

    /// The body's destination.
    var stream: ResponseBodyStream {
        ResponseBodyStream(
            onResponse: { [self] status, _ in
                state.withLock { state in
                    // Each attempt's response is a new stream, continued after the last event.
                    state.parser.reconnected()
                    state.isSuccess = (200..<300).contains(status.code)
                }
                return true
            },
            retryHeaders: { [self] in
                let id = state.withLock { $0.parser.lastEventID }
                return id.isEmpty ? [] : [("Last-Event-ID", id)]
            },
            { [self] bytes in receive(bytes) }
        )
    }

    /// The body of a response that was not a success, if one arrived.
    var errorDocument: Data? { state.withLock { $0.errorDocument } }

    private func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let events = state.withLock { state -> [ServerSentEvent] in
            guard state.isSuccess else {
                var document = state.errorDocument ?? Data()
                document.append(contentsOf: bytes.prefix(max(Self.errorDocumentLimit - document.count, 0)))
                state.errorDocument = document
                return []
            }
            return state.parser.parse(bytes)
        }
        for event in events {
            // The consumer has gone: stop the transfer.
            if case .terminated = continuation.yield(event) { return false }
        }
        return true
    }
}
