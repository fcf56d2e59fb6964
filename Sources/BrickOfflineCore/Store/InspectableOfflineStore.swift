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
