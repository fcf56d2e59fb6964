import BrickOfflineCore
import BrickRequest

/// One caller's entries, for the SQLite store's group commit of adds.
package struct AddBatch: Sendable {
    var drafts: [OfflineEntry.Draft]
    var dedupe: DedupePolicy
}

/// The SQLite store's adds, batched into one transaction (``GroupCommitter``): a caller that finds
/// no commit running commits at once, on its own thread (or, when the commit must wait for a lock,
/// suspended while the store's writer waits); nothing hops to another thread on the way, so an
/// add costs what SQLite spends on it.
package typealias GroupCommit = GroupCommitter<AddBatch, [OfflineEntry.ID]>

extension GroupCommitter where Item == AddBatch {
    /// One caller's entries.
    package typealias Batch = AddBatch
    /// Who commits, and who waits (``GroupCommitStateMachine``).
    package typealias StateMachine<Waiter> = GroupCommitStateMachine<Waiter>
}
