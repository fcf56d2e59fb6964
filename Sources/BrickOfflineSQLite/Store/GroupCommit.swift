import BrickOfflineCore
import BrickRequest
import Synchronization

/// Batches concurrent writes into one transaction (group commit), the I/O shell around
/// ``GroupCommit/StateMachine``: a caller that finds no commit running commits at once, on its own
/// thread (or, when the commit must wait for a lock, suspended while the store's writer waits),
/// its batch with every batch waiting; callers that find one running wait (suspended, not
/// blocking a thread) and are resumed with their result once the transaction holding their batch
/// committed. When a commit ends with batches waiting, the first of their callers becomes the next
/// committer. Nothing hops to another thread on the way: an add costs what SQLite spends on it.
package final class GroupCommit: Sendable {
    /// One caller's entries.
    struct Batch: Sendable {
        var drafts: [OfflineEntry.Draft]
        var dedupe: DedupePolicy
    }

    /// Who commits, and who waits: the decisions of the shell, without I/O (table-tested).
    package struct StateMachine<Waiter> {
        private var committing = false
        private var waiting: [Waiter] = []

        /// Idle: no commit runs, nobody waits.
        package init() {}

        /// How many callers wait.
        package var waitingCount: Int { waiting.count }

        /// What a caller that arrives does.
        package enum Arrival: Hashable {
            /// No commit runs: commit now, this caller's batch first.
            case commitNow
            /// A commit runs: wait to be resumed (with a result, or as the next committer).
            case wait
        }

        /// What the committer does once its transaction ended.
        package enum Handover {
            /// Nobody waits: no commit runs any more.
            case idle
            /// This waiter commits next (its batch first, then every batch waiting then).
            case nextCommitter(Waiter)
        }

        /// A caller arrives with a batch; `waiter` is how it is resumed if it must wait.
        package mutating func arrive(_ waiter: Waiter) -> Arrival {
            if committing {
                waiting.append(waiter)
                return .wait
            }
            committing = true
            return .commitNow
        }

        /// The committer takes every batch waiting into its transaction.
        package mutating func takeWaiting() -> [Waiter] {
            defer { waiting.removeAll() }
            return waiting
        }

        /// The committer's transaction ended.
        package mutating func committed() -> Handover {
            if waiting.isEmpty {
                committing = false
                return .idle
            }
            return .nextCommitter(waiting.removeFirst())
        }
    }

    /// How a waiting caller is resumed.
    private enum Turn: Sendable {
        case done(Result<[OfflineEntry.ID], OfflineStoreError>)
        case commit
    }

    private struct Waiting {
        var batch: Batch
        var continuation: CheckedContinuation<Turn, Never>
    }

    private let state = Lock(StateMachine<Waiting>())

    /// How many callers wait for a commit now (for tests).
    package var waitingCount: Int { state.withLock { $0.waitingCount } }

    /// Writes `batch` with others through `commit`, which runs on the committing caller's thread,
    /// gets every batch of the transaction (the committer's first) and returns one result per
    /// batch, in order.
    func submit(
        _ batch: Batch,
        commit: ([Batch]) async -> [Result<[OfflineEntry.ID], OfflineStoreError>]
    ) async throws -> [OfflineEntry.ID] {
        let turn = await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            switch state.withLock({ $0.arrive(Waiting(batch: batch, continuation: continuation)) }) {
            case .commitNow: continuation.resume(returning: .commit)
            case .wait: break
            }
        }
        switch turn {
        case .done(let result):
            return try result.get()
        case .commit:
            return try await commitRound(first: batch, commit)
        }
    }

    /// Commits `first` with every batch waiting, resumes their callers with their results, and
    /// hands the committer's role on.
    private func commitRound(
        first: Batch,
        _ commit: ([Batch]) async -> [Result<[OfflineEntry.ID], OfflineStoreError>]
    ) async throws -> [OfflineEntry.ID] {
        let taken = state.withLock { $0.takeWaiting() }
        let results = await commit([first] + taken.map(\.batch))
        for (waiting, result) in zip(taken, results.dropFirst()) {
            waiting.continuation.resume(returning: .done(result))
        }
        if case .nextCommitter(let next) = state.withLock({ $0.committed() }) {
            next.continuation.resume(returning: .commit)
        }
        return try results[0].get()
    }
}
