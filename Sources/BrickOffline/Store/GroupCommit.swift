import BrickRequest
import Synchronization

/// Batches concurrent writes into one transaction (group commit): the first caller to find no
/// commit running becomes the committer and writes every batch waiting, in one transaction, until
/// none is left; each caller returns once the transaction holding its batch has committed.
final class GroupCommit: Sendable {
    /// One caller's entries.
    struct Batch: Sendable {
        var drafts: [OfflineEntry.Draft]
        var dedupe: DedupePolicy
    }

    private struct Waiting {
        var batch: Batch
        var continuation: CheckedContinuation<[OfflineEntry.ID], any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        var committing = false
    }

    private let state = Lock(State())

    /// Writes `batch` with others through `commit`, which gets every waiting batch and returns
    /// one result per batch, in order.
    func submit(
        _ batch: Batch,
        commit: @escaping @Sendable ([Batch]) async -> [Result<[OfflineEntry.ID], OfflineStoreError>]
    ) async throws -> [OfflineEntry.ID] {
        try await withCheckedThrowingContinuation { continuation in
            let startsCommitter = state.withLock { state -> Bool in
                state.waiting.append(Waiting(batch: batch, continuation: continuation))
                if state.committing { return false }
                state.committing = true
                return true
            }
            guard startsCommitter else { return }
            Task { await self.drain(commit) }
        }
    }

    private func drain(
        _ commit: @Sendable ([Batch]) async -> [Result<[OfflineEntry.ID], OfflineStoreError>]
    ) async {
        while true {
            let taken = state.withLock { state -> [Waiting] in
                defer { state.waiting.removeAll() }
                if state.waiting.isEmpty { state.committing = false }
                return state.waiting
            }
            if taken.isEmpty { return }
            let results = await commit(taken.map(\.batch))
            for (waiting, result) in zip(taken, results) {
                waiting.continuation.resume(with: result.mapError { $0 as any Error })
            }
        }
    }
}
