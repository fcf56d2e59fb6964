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

    public func counts(at now: Date) async throws -> [OfflineQueueCounts] {
        try await run("count the queues") { [self] in
            var counts: [String: OfflineQueueCounts] = [:]
            let live = "\(schema).lease_is_live(lease_expires_at, \(leaseDuration.seconds))"
            // Leases and due dates by the database's clock, as every lease is judged.
            for try await (queue, pending, due, leased, dead, oldest) in try await client.query(
                """
                SELECT queue,
                    count(*) FILTER (WHERE dead_at IS NULL),
                    count(*) FILTER (WHERE dead_at IS NULL AND not_before <= clock_timestamp()
                                     AND (lease_token IS NULL OR NOT \(unescaped: live))),
                    count(*) FILTER (WHERE dead_at IS NULL AND lease_token IS NOT NULL AND \(unescaped: live)),
                    count(*) FILTER (WHERE dead_at IS NOT NULL),
                    min(created_at) FILTER (WHERE dead_at IS NULL)
                FROM \(unescaped: schema).entry GROUP BY queue
                """,
                logger: logger
            ).decode((String, Int64, Int64, Int64, Int64, Date?).self) {
                counts[queue] = OfflineQueueCounts(
                    queue: queue, pending: Int(pending), due: Int(due), leased: Int(leased), dead: Int(dead),
                    oldestPendingAt: oldest
                )
            }
            for try await (queue, owner, held) in try await client.query(
                """
                SELECT queue, coalesce(lease_owner, ''), count(*) FROM \(unescaped: schema).entry
                WHERE dead_at IS NULL AND lease_token IS NOT NULL AND \(unescaped: live)
                GROUP BY queue, lease_owner
                """,
                logger: logger
            ).decode((String, String, Int64).self) where !owner.isEmpty {
                counts[queue, default: OfflineQueueCounts(queue: queue)].leasedBy[owner] = Int(held)
            }
            for (queue, since) in try await pausedQueues() {
                counts[queue, default: OfflineQueueCounts(queue: queue)].pausedSince = since
            }
            return counts.values.sorted { $0.queue < $1.queue }
        }
    }

    public func page(queue: String, dead: Bool, after: OfflineEntry.ID?, limit: Int) async throws -> [OfflineEntry] {
        try await run("read a page of entries") { [self] in
            let limit = Int64(max(0, limit))
            // Keyset: (dead_at, sequence) after the given entry's, on the partial indexes.
            let query: PostgresQuery =
                switch (dead, after) {
                case (false, nil):
                    "SELECT * FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NULL ORDER BY sequence LIMIT \(limit)"
                case (false, let after?):
                    """
                    SELECT * FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NULL
                      AND sequence > (SELECT sequence FROM \(unescaped: schema).entry WHERE id = \(after) AND queue = \(queue) AND dead_at IS NULL)
                    ORDER BY sequence LIMIT \(limit)
                    """
                case (true, nil):
                    "SELECT * FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NOT NULL ORDER BY dead_at, sequence LIMIT \(limit)"
                case (true, let after?):
                    """
                    SELECT * FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NOT NULL
                      AND (dead_at, sequence) > (SELECT dead_at, sequence FROM \(unescaped: schema).entry
                                                 WHERE id = \(after) AND queue = \(queue) AND dead_at IS NOT NULL)
                    ORDER BY dead_at, sequence LIMIT \(limit)
                    """
                }
            return try await entries(client.query(query, logger: logger))
        }
    }

    public func entry(_ id: OfflineEntry.ID) async throws -> OfflineEntry? {
        try await run("read an entry") { [self] in
            try await entries(client.query("SELECT * FROM \(unescaped: schema).entry WHERE id = \(id)", logger: logger)).first
        }
    }

    public func deliveries(since: Date) async throws -> [OfflineDeliveryMinute] {
        try await run("read the deliveries per minute") { [self] in
            var minutes: [OfflineDeliveryMinute] = []
            for try await (queue, minute, delivered, failed) in try await client.query(
                """
                SELECT queue, minute, sum(delivered)::bigint, sum(failed)::bigint FROM \(unescaped: schema).delivery_minute
                WHERE minute >= \(since) GROUP BY queue, minute ORDER BY minute, queue
                """,
                logger: logger
            ).decode((String, Date, Int64, Int64).self) {
                minutes.append(OfflineDeliveryMinute(queue: queue, minute: minute, delivered: Int(delivered), failed: Int(failed)))
            }
            return minutes
        }
    }

    /// Whether this statement should also drop delivery counts older than a day: once a minute.
    func deliveryCountsPruneDue() -> Bool {
        let minute = Int64((Date().timeIntervalSince1970 / 60).rounded(.down))
        return prunedMinute.exchange(minute, ordering: .relaxed) != minute
    }
}
