import BrickOfflineCore
import BrickRequest
import Logging
import PostgresNIO

extension PersistentRequestQueue {
    /// Adds `endpoint` inside the caller's own transaction on `connection` (the outbox pattern):
    /// the entry exists if and only if that transaction commits, so a business write and the call
    /// that announces it are never one without the other. Idle workers are woken when it commits.
    ///
    /// ```swift
    /// try await client.withTransaction(logger: logger) { connection in
    ///     try await connection.query("INSERT INTO orders (id) VALUES (\(id))", logger: logger)
    ///     try await queue.add(NotifyPartner(order: id), in: connection)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - endpoint: Any brick endpoint, rendered now with the queue's session.
    ///   - options: Attempts, age, schedule and dedupe key of the entry.
    ///   - connection: The connection of the caller's open transaction, on the database of the
    ///     queue's ``PostgresOfflineStore``.
    /// - Returns: The entry's identity.
    /// - Throws: `BrickError`: `BrickError.Code.invalidRequest` when the queue's store is not a
    ///   ``PostgresOfflineStore`` or the request cannot be stored (a credential header),
    ///   `BrickError.Code.storage` when the insert fails (the caller's transaction is then failed too,
    ///   as PostgreSQL fails every statement after an error).
    @discardableResult
    public func add(
        _ endpoint: some RequestType,
        options: EntryOptions = EntryOptions(),
        in connection: PostgresConnection
    ) async throws(BrickError) -> OfflineEntry.ID {
        guard let store = store as? PostgresOfflineStore else {
            throw BrickError(
                .invalidRequest,
                message: "offline queue \(name): add(_:in:) needs a PostgresOfflineStore; this queue's store is \(type(of: store))"
            )
        }
        let draft = try draft(endpoint, options: options)
        do {
            // Announced on commit to every listener, this process's too ("outbox" is no worker's name):
            // the store cannot wake its own loops itself, since it does not see the commit.
            return try await store.insert([draft], dedupe: options.dedupe, on: connection, notifying: true, sender: "outbox").first ?? draft.id
        } catch let error as OfflineStoreError {
            throw BrickError(.storage, message: "offline queue \(name): \(error)", underlying: error)
        } catch {
            let failure = PostgresOfflineStore.storeError(error, doing: "add an entry in the caller's transaction")
            throw BrickError(.storage, message: "offline queue \(name): \(failure)", underlying: failure)
        }
    }
}
