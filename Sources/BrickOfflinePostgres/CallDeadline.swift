import BrickOfflineCore
import Synchronization

/// A store call that has not returned within its deadline fails, whatever the connection it waits
/// on does: a query caught by a server restart must never hold a worker's attempt (and its place
/// under the cap) for ever. The call's task is cancelled and left to end on its own.
package enum CallDeadline {
    /// How long one store call (a statement, or a transaction) may take.
    package static let limit: Duration = .seconds(30)

    /// One call in flight: whichever of its work, its timer or its caller's cancellation comes
    /// first resumes the caller, once.
    private final class Call<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<T, any Error>?
            var work: Task<Void, Never>?
            var timer: Task<Void, Never>?
            var finished = false
        }

        private let state = Mutex(State())

        func start(
            _ continuation: CheckedContinuation<T, any Error>,
            what: String,
            limit: Duration,
            explanation: String?,
            body: @escaping @Sendable () async throws -> T
        ) {
            let cancelled = state.withLock { state -> Bool in
                if state.finished { return true }
                state.continuation = continuation
                return false
            }
            // The caller was cancelled before the call began.
            if cancelled {
                continuation.resume(throwing: CancellationError())
                return
            }
            let work = Task {
                do { self.finish(.success(try await body())) } catch { self.finish(.failure(error)) }
            }
            let timer = Task {
                do { try await Task.sleep(for: limit) } catch { return }
                let message = "cannot \(what): no answer from the database within \(limit)" + (explanation.map { ": " + $0 } ?? "")
                self.finish(.failure(OfflineStoreError(.io, message: message)))
            }
            let finished = state.withLock { state -> Bool in
                state.work = work
                state.timer = timer
                return state.finished
            }
            // Finished before the tasks were recorded: stop the timer now.
            if finished { timer.cancel() }
        }

        func finish(_ result: Result<T, any Error>) {
            let (continuation, work, timer) = state.withLock { state in
                defer {
                    state.finished = true
                    state.continuation = nil
                }
                return (state.continuation, state.work, state.timer)
            }
            guard let continuation else { return }
            timer?.cancel()
            if case .failure = result { work?.cancel() }
            continuation.resume(with: result)
        }
    }

    /// Runs `body`, failing with `OfflineStoreError` (kind `io`) after `limit` (its message ends
    /// with `explanation`, when given: what to check), or at once when the calling task is cancelled.
    package static func run<T: Sendable>(
        _ what: String,
        limit: Duration = limit,
        explanation: String? = nil,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let call = Call<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                call.start(continuation, what: what, limit: limit, explanation: explanation, body: body)
            }
        } onCancel: {
            call.finish(.failure(CancellationError()))
        }
    }
}
