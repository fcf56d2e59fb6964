import Foundation

/// A store an operator's tool can survey (`brick-queue`): besides what delivery needs, the names
/// of the queues it holds. `SQLiteOfflineStore` and `PostgresOfflineStore` conform.
public protocol InspectableOfflineStore: OfflineStore {
    /// The queues that hold entries, pending or dead, sorted by name.
    func queueNames() async throws -> [String]
}
