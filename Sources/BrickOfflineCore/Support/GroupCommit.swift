import BrickRequest
import Synchronization

/// Writes concurrent callers' items in one transaction (group commit), the I/O shell around
/// ``GroupCommitStateMachine``: a caller that finds no commit running commits at once, on its own
/// task, its item with every item waiting; callers that find one running wait (suspended, not
/// blocking a thread) and are resumed with their result once the transaction holding their item
/// committed. When a commit ends with items waiting, the first of their callers becomes the next
/// committer. No timer: what arrives while a commit runs is the next batch, so an idle store
/// writes at once and a busy one in batches as large as its load.
///
/// The SQLite store's adds and both stores' attempt outcomes go through one each.
package final class GroupCommitter<Item: Sendable, Success: Sendable>: Sendable {
    /// How a waiting caller is resumed.
    private enum Turn: Sendable {
        case done(Result<Success, OfflineStoreError>)
        case commit
    }

    private struct Waiting {
        var item: Item
        var continuation: CheckedContinuation<Turn, Never>
    }

    private let state = Lock(GroupCommitStateMachine<Waiting>())
    /// The most items one commit takes (the rest wait for the next).
    private let maxBatch: Int
    /// How long a committer gathers items before it writes, unless a whole batch waits already.
    private let window: Duration

    /// - Parameters:
    ///   - maxBatch: The most items one commit takes. Default: no limit.
    ///   - window: How long a committer waits for more items before it writes (`.zero`: it
    ///     writes at once, with what waits then). Default `.zero`.
    package init(maxBatch: Int = .max, window: Duration = .zero) {
        self.maxBatch = max(1, maxBatch)
        self.window = window
    }

    /// How many callers wait for a commit now (for tests).
    package var waitingCount: Int { state.withLock { $0.waitingCount } }
    /// Items in the commit under way now (for tests).
    private let inRound = Atomic<Int>(0)
    /// How many callers' items are in the commit under way or wait for the next (for tests: a
    /// caller that arrived just before the first commit began is in it, not waiting).
    package var gatheredCount: Int { inRound.load(ordering: .relaxed) + waitingCount }

    /// Writes `item` with others through `commit`, which runs on the committing caller's task,
    /// gets every item of the transaction (the committer's first) and returns one result per
    /// item, in order.
    package func submit(
        _ item: Item,
        commit: ([Item]) async -> [Result<Success, OfflineStoreError>]
    ) async throws(OfflineStoreError) -> Success {
        let turn = await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            switch state.withLock({ $0.arrive(Waiting(item: item, continuation: continuation)) }) {
            case .commitNow: continuation.resume(returning: .commit)
            case .wait: break
            }
        }
        switch turn {
        case .done(let result):
            return try result.get()
        case .commit:
            return try await commitRound(first: item, commit)
        }
    }

    /// Commits `first` with the items waiting, resumes their callers with their results, and
    /// hands the committer's role on.
    private func commitRound(
        first: Item,
        _ commit: ([Item]) async -> [Result<Success, OfflineStoreError>]
    ) async throws(OfflineStoreError) -> Success {
        if window > .zero, state.withLock({ $0.waitingCount }) < maxBatch - 1 {
            // Gathers the outcomes that end in the next moments into this commit: one statement
            // for many, at the price of this short wait (a cancelled sleep just writes now).
            try? await Task.sleep(for: window)
        }
        let taken = state.withLock { $0.takeWaiting(atMost: maxBatch - 1) }
        inRound.store(taken.count + 1, ordering: .relaxed)
        let results = await commit([first] + taken.map(\.item))
        inRound.store(0, ordering: .relaxed)
        for (index, waiting) in taken.enumerated() {
            let result =
                index + 1 < results.count
                ? results[index + 1] : .failure(OfflineStoreError(.io, message: "the commit returned no result for this item"))
            waiting.continuation.resume(returning: .done(result))
        }
        if case .nextCommitter(let next) = state.withLock({ $0.committed() }) {
            next.continuation.resume(returning: .commit)
        }
        guard let own = results.first else { throw OfflineStoreError(.io, message: "the commit returned no result") }
        return try own.get()
    }
}

/// Who commits, and who waits: the decisions of ``GroupCommitter``, without I/O (table-tested).
package struct GroupCommitStateMachine<Waiter> {
    private var committing = false
    private var waiting: [Waiter] = []

    /// Idle: no commit runs, nobody waits.
    package init() {}

    /// How many callers wait.
    package var waitingCount: Int { waiting.count }

    /// What a caller that arrives does.
    package enum Arrival: Hashable {
        /// No commit runs: commit now, this caller's item first.
        case commitNow
        /// A commit runs: wait to be resumed (with a result, or as the next committer).
        case wait
    }

    /// What the committer does once its transaction ended.
    package enum Handover {
        /// Nobody waits: no commit runs any more.
        case idle
        /// This waiter commits next (its item first, then every item waiting then).
        case nextCommitter(Waiter)
    }

    /// A caller arrives with an item; `waiter` is how it is resumed if it must wait.
    package mutating func arrive(_ waiter: Waiter) -> Arrival {
        if committing {
            waiting.append(waiter)
            return .wait
        }
        committing = true
        return .commitNow
    }

    /// The committer takes the items waiting (the first `limit` of them) into its transaction.
    package mutating func takeWaiting(atMost limit: Int = .max) -> [Waiter] {
        let count = min(max(0, limit), waiting.count)
        defer { waiting.removeFirst(count) }
        return Array(waiting.prefix(count))
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
