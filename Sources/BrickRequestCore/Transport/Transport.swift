import Synchronization

/// The one seam between BrickRequest and the network.
///
/// A transport starts a rendered ``TransportRequest`` and delivers its outcome exactly once: a
/// ``TransportResponse`` (any status, including 4xx and 5xx) or a ``TransportError``. The completion
/// runs on the transport's own thread, so it must return quickly and never block; hop elsewhere for
/// real work. ``CurlTransport`` is the real implementation; `BrickTesting`'s `StubTransport` is the
/// scripted one used in tests.
///
/// Implementation requirements:
/// - Call `completion` exactly once per `start`, also after ``TransportTask/cancel()`` (with a
///   ``TransportError/Kind/cancelled`` error unless the result was already delivered).
/// - Never call `completion` synchronously from inside `start`.
public protocol Transport: Sendable {
    /// Starts a request.
    ///
    /// - Parameters:
    ///   - request: The rendered request.
    ///   - completion: Called exactly once with the outcome, on the transport's thread.
    /// - Returns: A handle that cancels the request.
    func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask

    /// Tells the transport that the network changed (a link, an address or a route): connections
    /// opened before may be dead and must not be reused. A ``Session`` calls it on every change its
    /// ``ReachabilityMonitor`` reports. The default does nothing.
    func networkDidChange()
}

extension Transport {
    /// Does nothing: a transport without a connection pool has nothing to forget.
    public func networkDidChange() {}
}

/// A ``Transport`` with a thread of its own that it lends to the code answering its completions:
/// a ``Session`` drains its default callback queue there, and ``Session/preferredTaskExecutor``
/// is its executor. The curl transport is the one (`package`: the hand-off's contract with the
/// session's callback queue is this package's own).
package protocol ThreadedTransport: Transport {
    /// Runs `work` on the transport's own thread soon after the current completion returns, at a
    /// point where the transport is between rounds of I/O, so that code answering a completion
    /// needs no thread hop. `work` may block: a transport that accepts it keeps its I/O going on
    /// another thread when `work` runs too long (`stallLimit`).
    ///
    /// Only meaningful inside a completion. Returns `false`, without running `work`, when called
    /// elsewhere; the caller then runs `work` its own way. A ``Session`` uses it to drain its default callback queue.
    ///
    /// - Parameter work: What to run.
    /// - Returns: Whether the transport took `work`.
    func scheduleOnTransportThread(_ work: @escaping @Sendable () -> Void) -> Bool

    /// An executor for tasks that run this transport's requests, on which they resume after each
    /// response with no thread hop (`CurlTransport.taskExecutor`), or `nil` when it has none. Pass it to
    /// `Task(executorPreference:)` or `TaskGroup.addTask(executorPreference:)`; `nil` there means no preference.
    var preferredTaskExecutor: (any TaskExecutor)? { get }
}

/// A handle to a request started on a ``Transport``.
public struct TransportTask: Sendable {
    private let onCancel: @Sendable () -> Void

    /// Creates a handle whose ``cancel()`` runs `onCancel`.
    ///
    /// - Parameter onCancel: What cancelling does; must be safe to call more than once.
    public init(onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = onCancel
    }

    /// Cancels the request. Its completion receives ``TransportError/Kind/cancelled`` unless it
    /// had already finished. Safe to call more than once and from any thread.
    public func cancel() {
        onCancel()
    }
}

extension Transport {
    /// Sends a request and waits for its outcome. Cancelling the calling task cancels the transfer.
    ///
    /// On a ``CurlTransport`` made with the opt-in
    /// `resumesTasksAtSafePoint`, a calling task with no executor
    /// preference and no actor isolation goes on on the transport's thread after the response,
    /// until it next suspends, as a ``Session``'s `value` does.
    ///
    /// - Parameter request: The rendered request.
    /// - Returns: The response (any status).
    /// - Throws: ``TransportError``; ``TransportError/Kind/cancelled`` when the task was cancelled.
    public func send(_ request: TransportRequest) async throws(TransportError) -> TransportResponse {
        let box = TaskBox()
        let resuming = self as? any ResumingTransport
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation {
                (continuation: UnsafeContinuation<Result<TransportResponse, TransportError>, Never>) in
                let task = self.start(request) { continuation.resume(returning: $0, through: resuming) }
                box.set(task)
            }
        } onCancel: {
            box.cancel()
        }
        return try result.get()
    }
}

/// Holds a task handle that may arrive after cancellation was requested.
private final class TaskBox: Sendable {
    private let state = Lock<(task: TransportTask?, cancelled: Bool)>((nil, false))

    func set(_ task: TransportTask) {
        let cancelNow = state.withLock { state -> Bool in
            state.task = task
            return state.cancelled
        }
        if cancelNow { task.cancel() }
    }

    func cancel() {
        let task = state.withLock { state -> TransportTask? in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }
}
