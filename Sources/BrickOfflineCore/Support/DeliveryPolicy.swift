import BrickRequest
import Foundation

/// What the owner of a ``DeliveryLoop`` supplies: how entries are leased, what an attempt is, what
/// is reported. ``QueueCore`` (batch leases, an HTTP delivery per entry) and ``ManagerCore`` (head
/// of line at cap 1, the user's `perform`) are the two.
protocol DeliveryPolicy: Sendable {
    var store: any OfflineStore { get }
    /// The queue's name in the store.
    var name: String { get }
    /// The most attempts at once, by every worker of the store together (read at each turn).
    var cap: Int { get }
    /// How long the loop waits before leasing again after the store failed.
    var leaseRetryInterval: Duration { get }
    /// How long a lease lasts before another worker may take the entry (extended while it runs).
    var leaseDuration: Duration { get }
    /// The loop's current date (on the session's clock).
    func now() -> Date
    /// Before each lease.
    func willLease() async
    /// A lease returned nothing: when the next entry is due (`nil`: none, or nothing to wait for
    /// but a wake-up). `anyRunning`: attempts are under way here; `headOfLine`: the lease took
    /// only the head of the queue, whose due date is the one that matters.
    func idle(anyRunning: Bool, headOfLine: Bool) async -> Date?
    /// One attempt of a leased entry, to its end: its outcome is recorded, unless
    /// ``DeliveryLoop/isHandingBack(_:)`` says the loop hands the entry back instead.
    func attempt(_ entry: OfflineEntry) async
    /// Reachability changed (the loop makes the paused entries due before its next lease).
    func reachabilityChanged()
    func report(storeFailure: String)
}
