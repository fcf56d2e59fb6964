import Foundation

/// What a delivery loop (the queue's, the manager's) does when its lease came back empty: a pure
/// decision, shared by both loops and tested as a table (`IdleWakeTests`).
///
/// An empty lease while the store says an entry is due means one of two things: the entry was
/// added between the lease and the look (lease again, at once), or this worker may not take it —
/// the fleet's cap is held by other workers, or the head of line waits. Sleeping until that due
/// date, which is already past, is no sleep at all: the loop would spin, a store transaction per
/// turn, until a peer finished. So the second empty lease in a row with something due sleeps until
/// woken instead: a store shared by a fleet wakes its loops when a peer finishes or hands an entry
/// back (and polls); a store of one process is looked at again after ``fallback``.
package enum IdleWake: Equatable, Sendable {
    /// Lease again now.
    case leaseAgain
    /// Sleep until woken, or until the date (`nil`: until woken).
    case sleep(until: Date?)

    /// How long a loop on a store that does not wake it waits before looking again.
    package static let fallback: TimeInterval = 1

    /// - Parameters:
    ///   - due: When the store's next entry is due (`nil`: none is pending).
    ///   - now: The loop's current date.
    ///   - emptyBefore: Whether the previous lease also came back empty with an entry due.
    ///   - storeWakes: Whether the store wakes the loop when other processes change it
    ///     (``OfflineStore/pollInterval`` is set).
    package static func decide(due: Date?, now: Date, emptyBefore: Bool, storeWakes: Bool) -> IdleWake {
        guard let due else { return .sleep(until: nil) }
        if due > now { return .sleep(until: due) }
        if !emptyBefore { return .leaseAgain }
        return .sleep(until: storeWakes ? nil : now.addingTimeInterval(fallback))
    }
}
