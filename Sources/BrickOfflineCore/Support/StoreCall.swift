import BrickRequest
import Foundation
import Synchronization

/// Runs a call on `store` for queue `name`, turning its failure into a ``BrickError`` with code
/// `storage` that names the caller (`"offline queue uploads"`): what the queue's and the manager's
/// public methods throw.
func storeCall<T: Sendable>(
    _ store: any OfflineStore,
    queue name: String,
    caller: String,
    _ call: @Sendable (any OfflineStore, String) async throws -> T
) async throws(BrickError) -> T {
    do {
        return try await call(store, name)
    } catch let error as BrickError {
        throw error
    } catch {
        throw BrickError(.storage, message: "\(caller): \(error)", underlying: error)
    }
}
