// What an operator's tool needs of the store (brick-queue): its queues, a removal that never takes
// an entry from its worker, pauses.
import BrickOfflineCore
import BrickRequest
import Foundation
import Logging
import PostgresNIO
import Synchronization

extension PostgresOfflineStore: InspectableOfflineStore {
    public func isPaused(queue: String) async throws -> Bool {
        try await run("read whether the queue is paused") { [self] in
            var paused = false
            for try await value in try await client.query(
                "SELECT EXISTS (SELECT 1 FROM \(unescaped: schema).paused_queue WHERE queue = \(queue))",
                logger: logger
            ).decode(Bool.self) {
                paused = value
            }
            return paused
        }
    }

    public func setPaused(_ paused: Bool, queue: String) async throws {
        try OfflineEntry.checkQueueName(queue)
        try await run(paused ? "pause the queue" : "resume the queue") { [self] in
            if paused {
                try await client.executeToEnd(
                    "INSERT INTO \(unescaped: schema).paused_queue (queue) VALUES (\(queue)) ON CONFLICT DO NOTHING",
                    logger: logger
                )
            } else {
                try await client.executeToEnd("DELETE FROM \(unescaped: schema).paused_queue WHERE queue = \(queue)", logger: logger)
                // Wakes the workers at once rather than at their next poll (sent before returning:
                // the caller may be a command that exits next).
                try await client.executeToEnd(
                    "SELECT pg_notify(\("\(schema)_wake"), \(Notifier.payload(sender: workerName, queue: queue)))",
                    logger: logger
                )
            }
        }
    }

    public func pausedQueues() async throws -> [String: Date] {
        try await run("list the paused queues") { [self] in
            var paused: [String: Date] = [:]
            for try await (queue, since) in try await client.query(
                "SELECT queue, paused_at FROM \(unescaped: schema).paused_queue",
                logger: logger
            ).decode((String, Date).self) {
                paused[queue] = since
            }
            return paused
        }
    }

    public func queueNames() async throws -> [String] {
        try await run("list the queues") { [self] in
            var names: [String] = []
            for try await name in try await client.query(
                "SELECT DISTINCT queue FROM \(unescaped: schema).entry ORDER BY queue",
                logger: logger
            ).decode(String.self) {
                names.append(name)
            }
            return names
        }
    }

    public func remove(_ id: OfflineEntry.ID, unlessLeasedAt now: Date) async throws -> OfflineEntry.Removal {
        try await run("remove an entry") { [self] in
            // One statement decides, by the database's clock, as every lease is judged.
            let removed = try await changed(
                client.query(
                    """
                    WITH done AS (
                        DELETE FROM \(unescaped: schema).entry WHERE id = \(id)
                          AND (dead_at IS NOT NULL OR lease_token IS NULL
                               OR NOT \(unescaped: schema).lease_is_live(lease_expires_at, \(leaseDuration.seconds)))
                        RETURNING queue)
                    SELECT queue FROM done
                    """,
                    logger: logger
                )
            )
            if removed { return .removed }
            var expiry: Date?? = .none
            for try await value in try await client.query(
                "SELECT lease_expires_at FROM \(unescaped: schema).entry WHERE id = \(id)",
                logger: logger
            ).decode(Date?.self) {
                expiry = .some(value)
            }
            switch expiry {
            case .none: return .notFound
            case .some(let date): return .leased(until: date ?? now)
            }
        }
    }
}
