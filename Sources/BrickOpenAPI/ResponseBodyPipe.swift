@_spi(TransportImplementation) import BrickRequest
import HTTPTypes
import OpenAPIRuntime
import Synchronization

/// The bytes of a response body between the transport (which pushes them, on its thread) and the
/// `HTTPBody` a generated client reads: at most `highWater` bytes wait; beyond that the transfer
/// is paused until the reader catches up (backpressure). One lock guards its state.
final class ResponseBodyPipe: Sendable {
    private struct State {
        var chunks: [ArraySlice<UInt8>] = []
        var head = 0
        var buffered = 0
        /// The transfer was paused for want of a reader.
        var paused = false
        var finished = false
        var failure: (any Error)?
        var waiter: CheckedContinuation<ArraySlice<UInt8>?, any Error>?
        /// A response the session may retry: its body is kept (up to `provisionalLimit`), never
        /// paused for, and dropped if another attempt follows.
        var provisional = false
        /// Bytes of a provisional body beyond `provisionalLimit`, which were not kept: such a
        /// body, if it turns out to be the last, ends with an error, never as if whole.
        var droppedBytes = 0
        /// The status of the response whose body is buffered.
        var status = 0
    }

    private let state = Lock(State())
    let highWater: Int
    /// What tests watch (backlog, pauses), or `nil`.
    let monitor: BodyMonitor?
    /// What a provisional response's body may hold (an error document).
    static let provisionalLimit = 1 << 20
    /// Resumes the paused transfer; set once, before the transfer starts.
    nonisolated(unsafe) var resume: @Sendable () -> Void = {}

    init(highWater: Int, monitor: BodyMonitor?) {
        self.highWater = max(1, highWater)
        self.monitor = monitor
    }

    /// A new response begins (the first, or another attempt's): what an earlier one left is dropped.
    func responseStarted(provisional: Bool, status: Int = 0) {
        state.withLock { state in
            state.chunks.removeAll()
            state.head = 0
            state.buffered = 0
            state.provisional = provisional
            state.droppedBytes = 0
            state.status = status
        }
    }

    /// The transport's receiver: takes a piece, and says whether to pause.
    func receive(_ bytes: UnsafeRawBufferPointer) -> ResponseBodyStream.Demand {
        let chunk = ArraySlice(bytes.bindMemory(to: UInt8.self))
        let (waiter, demand) = state.withLock { state -> (CheckedContinuation<ArraySlice<UInt8>?, any Error>?, ResponseBodyStream.Demand) in
            if state.provisional {
                if state.buffered + chunk.count <= Self.provisionalLimit && state.droppedBytes == 0 {
                    state.chunks.append(chunk)
                    state.buffered += chunk.count
                } else {
                    state.droppedBytes += chunk.count
                }
                return (nil, .more)
            }
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, .more)
            }
            state.chunks.append(chunk)
            state.buffered += chunk.count
            monitor?.noteResponseBacklog(state.buffered)
            if state.buffered > highWater {
                state.paused = true
                return (nil, .pause)
            }
            return (nil, .more)
        }
        waiter?.resume(returning: chunk)
        if demand == .pause { monitor?.notePause() }
        return demand
    }

    /// The body is complete (`nil`) or failed.
    func finish(throwing error: (any Error)?) {
        let waiter = state.withLock { state -> CheckedContinuation<ArraySlice<UInt8>?, any Error>? in
            state.finished = true
            state.failure = error
            if error == nil && state.droppedBytes > 0 {
                // The last attempt was a retryable status whose body outgrew what is kept while
                // another attempt may follow: what was kept is read, then this error.
                let kept = state.buffered  // a provisional body is not read before it ends
                state.failure = BrickError(
                    .invalidResponse,
                    message: "the body of the last response (status \(state.status), retryable) was larger than the 1 MiB kept while another attempt might follow: \(kept) of \(kept + state.droppedBytes) bytes were kept",
                    status: state.status == 0 ? nil : HTTPResponse.Status(code: state.status)
                )
            }
            state.provisional = false
            defer { state.waiter = nil }
            return state.waiter
        }
        guard let waiter else { return }
        if let error { waiter.resume(throwing: error) } else { waiter.resume(returning: nil) }
    }

    /// The reader's next piece: `nil` at the end.
    func next() async throws -> ArraySlice<UInt8>? {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ArraySlice<UInt8>?, any Error>) in
            let (outcome, resumeTransfer) = state.withLock { state -> (Result<ArraySlice<UInt8>?, any Error>?, Bool) in
                if state.head < state.chunks.count {
                    let chunk = state.chunks[state.head]
                    state.head += 1
                    if state.head == state.chunks.count {
                        state.chunks.removeAll(keepingCapacity: true)
                        state.head = 0
                    }
                    state.buffered -= chunk.count
                    var resumeTransfer = false
                    if state.paused, state.buffered <= highWater / 2 {
                        state.paused = false
                        resumeTransfer = true
                    }
                    return (.success(chunk), resumeTransfer)
                }
                if state.finished {
                    if let failure = state.failure { return (.failure(failure), false) }
                    return (.success(nil), false)
                }
                state.waiter = continuation
                // Nothing buffered: a transfer paused earlier must go on.
                let resumeTransfer = state.paused
                state.paused = false
                return (nil, resumeTransfer)
            }
            if resumeTransfer { resume() }
            if let outcome { continuation.resume(with: outcome) }
        }
    }
}

/// A response body as an `AsyncSequence` for `HTTPBody`: reading it pulls from the pipe;
/// cancelling the reading task, or dropping the body unread, cancels the transfer.
final class ResponseBodySequence: AsyncSequence, Sendable {
    typealias Element = ArraySlice<UInt8>
    let pipe: ResponseBodyPipe
    let cancel: @Sendable () -> Void

    init(pipe: ResponseBodyPipe, cancel: @escaping @Sendable () -> Void) {
        self.pipe = pipe
        self.cancel = cancel
    }

    deinit {
        // A body nobody reads to its end must not keep its transfer (and connection) paused forever.
        cancel()
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let sequence: ResponseBodySequence

        mutating func next() async throws -> ArraySlice<UInt8>? {
            let sequence = self.sequence
            return try await withTaskCancellationHandler {
                try await sequence.pipe.next()
            } onCancel: {
                sequence.cancel()
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(sequence: self) }
}

/// What a test watches of an operation's bodies: the most response bytes that waited for the
/// client, how often the transfer paused for it, and the request bodies' sources.
package final class BodyMonitor: Sendable {
    private struct Figures {
        var largestResponseBacklog = 0
        var pauses = 0
        var sources: [RequestBodySource] = []
    }

    private let figures = Lock(Figures())

    package init() {}

    /// The most response bytes that waited for the client.
    package var largestResponseBacklog: Int { figures.withLock { $0.largestResponseBacklog } }
    /// How often a transfer paused for the client.
    package var pauses: Int { figures.withLock { $0.pauses } }
    /// The streamed request bodies' sources, in order.
    package var sources: [RequestBodySource] { figures.withLock { $0.sources } }

    func noteResponseBacklog(_ backlog: Int) {
        figures.withLock { $0.largestResponseBacklog = max($0.largestResponseBacklog, backlog) }
    }

    func notePause() { figures.withLock { $0.pauses += 1 } }

    func noteSource(_ source: RequestBodySource) { figures.withLock { $0.sources.append(source) } }
}
