import Foundation

/// A store an operator's tool can survey and repair (`brick-queue`): besides what delivery needs,
/// the names of the queues it holds and a removal that never takes an entry from under the worker
/// that holds its lease. `SQLiteOfflineStore` and `PostgresOfflineStore` conform.
public protocol InspectableOfflineStore: OfflineStore {
    /// The queues that hold entries, pending or dead, sorted by name.
    func queueNames() async throws -> [String]

    /// Removes the entry `id`, pending or dead, unless a worker holds its lease at `now` (on
    /// PostgreSQL, the database's clock decides, as it does for every lease).
    ///
    /// - Parameters:
    ///   - id: The entry.
    ///   - now: The time leases are judged at.
    /// - Returns: What happened: removed, left to its worker, or not found.
    func remove(_ id: OfflineEntry.ID, unlessLeasedAt now: Date) async throws -> OfflineEntry.Removal

    /// Pauses `queue` (every worker stops claiming from it at its next lease; attempts under way
    /// finish) or resumes it (its workers are woken where the store can wake them). Idempotent.
    ///
    /// - Parameters:
    ///   - paused: `true` to pause, `false` to resume.
    ///   - queue: The queue.
    func setPaused(_ paused: Bool, queue: String) async throws

    /// The paused queues and since when.
    func pausedQueues() async throws -> [String: Date]

    /// Every queue's counts at `now`, counted by the store (one aggregate query, not a read of
    /// every entry): what `brick-queue status` and the console's overview show.
    ///
    /// - Parameter now: The time leases and due dates are judged at (on PostgreSQL the
    ///   database's clock judges leases, as it does for every lease).
    /// - Returns: One per queue that holds an entry or is paused, sorted by name.
    func counts(at now: Date) async throws -> [OfflineQueueCounts]

    /// One page of a queue's pending entries (in delivery order) or dead letters (in the order
    /// they died), after the entry `after`: keyset paging, so a page costs the same at the start
    /// of a 100,000-entry queue as at its end.
    ///
    /// - Parameters:
    ///   - queue: The queue.
    ///   - dead: `true` for its dead letters.
    ///   - after: The last entry of the previous page, or `nil` for the first page.
    ///   - limit: At most this many.
    /// - Returns: The page; empty past the end, or when `after` is not an entry of that list.
    func page(queue: String, dead: Bool, after: OfflineEntry.ID?, limit: Int) async throws -> [OfflineEntry]

    /// The entry `id`, pending or dead, or `nil`.
    func entry(_ id: OfflineEntry.ID) async throws -> OfflineEntry?

    /// Makes the dead letter `id` pending again, as ``OfflineStore/retryDeadLetter(_:now:)`` does,
    /// with its payload replaced in the same transaction — for a request that must now go
    /// elsewhere (``InspectableOfflineStore/retryDeadLetter(_:rewritingURL:now:)``). Changes
    /// nothing and fails with ``OfflineStoreError/Kind/notFound`` when `id` is no dead letter, or
    /// its payload is no longer `expected` (someone changed it since it was read).
    ///
    /// - Parameters:
    ///   - id: The dead letter.
    ///   - expected: Its payload as read.
    ///   - payload: The payload it is retried with.
    ///   - now: When it is due.
    func retryDeadLetter(_ id: OfflineEntry.ID, replacingPayload expected: Data, with payload: Data, now: Date) async throws

    /// Attempts that ended — delivered, or failed (rescheduled or set aside) — per queue and
    /// minute since `since` (the store keeps a day).
    func deliveries(since: Date) async throws -> [OfflineDeliveryMinute]
}

/// One queue's counts (``InspectableOfflineStore/counts(at:)``).
public struct OfflineQueueCounts: Sendable, Hashable {
    /// The queue.
    public var queue: String
    /// Entries waiting for delivery (leased ones included).
    public var pending: Int
    /// Pending, not leased, and due: their next attempt's date has come.
    public var due: Int
    /// Under a worker's lease now.
    public var leased: Int
    /// How many each worker holds, where the store records who (PostgreSQL).
    public var leasedBy: [String: Int]
    /// Dead letters.
    public var dead: Int
    /// When the oldest pending entry was added.
    public var oldestPendingAt: Date?
    /// Since when an operator paused the queue, or `nil`.
    public var pausedSince: Date?

    /// Counts.
    public init(
        queue: String, pending: Int = 0, due: Int = 0, leased: Int = 0, leasedBy: [String: Int] = [:], dead: Int = 0,
        oldestPendingAt: Date? = nil, pausedSince: Date? = nil
    ) {
        self.queue = queue
        self.pending = pending
        self.due = due
        self.leased = leased
        self.leasedBy = leasedBy
        self.dead = dead
        self.oldestPendingAt = oldestPendingAt
        self.pausedSince = pausedSince
    }
}

/// Attempts of one queue that ended in one minute (``InspectableOfflineStore/deliveries(since:)``).
public struct OfflineDeliveryMinute: Sendable, Hashable {
    /// The queue.
    public var queue: String
    /// The minute's start.
    public var minute: Date
    /// Entries delivered.
    public var delivered: Int
    /// Attempts that failed: the entry rescheduled or set aside.
    public var failed: Int

    /// A minute's counts.
    public init(queue: String, minute: Date, delivered: Int, failed: Int) {
        self.queue = queue
        self.minute = minute
        self.delivered = delivered
        self.failed = failed
    }
}

extension OfflineEntry {
    /// What ``InspectableOfflineStore/remove(_:unlessLeasedAt:)`` did.
    public enum Removal: Sendable, Hashable {
        /// The entry is gone.
        case removed
        /// A worker holds the entry's lease until this date: it was left alone.
        case leased(until: Date)
        /// No entry has this ID.
        case notFound
    }
}
