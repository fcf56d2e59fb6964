// What an operator's tool needs of the store (brick-queue): its queues, a removal that never takes
// an entry from its worker, pauses.
import BrickOfflineCore
import BrickRequest
import Foundation
import GRDB
import Synchronization

extension SQLiteOfflineStore: InspectableOfflineStore {
    public func isPaused(queue: String) async throws -> Bool {
        try await read("read whether the queue is paused") { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM pausedQueue WHERE queue = ?)", arguments: [queue]) ?? false
        }
    }

    public func setPaused(_ paused: Bool, queue: String) async throws {
        try OfflineEntry.checkQueueName(queue)
        try await write(paused ? "pause the queue" : "resume the queue") { db in
            if paused {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO pausedQueue (queue, pausedAt) VALUES (?, ?)",
                    arguments: [queue, Date().timeIntervalSince1970]
                )
            } else {
                try db.execute(sql: "DELETE FROM pausedQueue WHERE queue = ?", arguments: [queue])
            }
        }
        // A resumed queue's loop sleeps until woken (a paused queue has nothing due): wake it.
        if !paused { wake(queue: queue) }
    }

    /// Yields when this store object resumes `queue` or puts one of its dead letters back (an
    /// operator's console beside the worker, in this process): the queue's loop then looks again
    /// instead of sleeping until its next add. Only this process writes a SQLite store.
    public func wakeUps(queue: String) -> AsyncStream<Void>? {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let listener = UUID()
        localWakeUps.withLock { $0[queue, default: [:]][listener] = continuation }
        continuation.onTermination = { [weak self] _ in
            self?.localWakeUps.withLock { _ = $0[queue]?.removeValue(forKey: listener) }
        }
        return stream
    }

    func wake(queue: String) {
        for continuation in localWakeUps.withLock({ Array(($0[queue] ?? [:]).values) }) { continuation.yield() }
    }

    public func pausedQueues() async throws -> [String: Date] {
        try await read("list the paused queues") { db in
            var paused: [String: Date] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT queue, pausedAt FROM pausedQueue") {
                paused[row["queue"]] = Date(timeIntervalSince1970: row["pausedAt"])
            }
            return paused
        }
    }

    public func queueNames() async throws -> [String] {
        try await read("list the queues") { db in
            try String.fetchAll(db, sql: "SELECT DISTINCT queue FROM entry ORDER BY queue")
        }
    }

    public func remove(_ id: OfflineEntry.ID, unlessLeasedAt now: Date) async throws -> OfflineEntry.Removal {
        try await write("remove an entry") { db in
            // One statement decides: a lease taken after a separate check could not slip between.
            try db.execute(
                sql: """
                    DELETE FROM entry WHERE id = ?
                      AND (deadAt IS NOT NULL OR leaseToken IS NULL OR leaseExpiresAt <= ?)
                    """,
                arguments: [id.uuidString, now.timeIntervalSince1970]
            )
            if db.changesCount > 0 { return .removed }
            guard let expiry = try Double.fetchOne(db, sql: "SELECT leaseExpiresAt FROM entry WHERE id = ?", arguments: [id.uuidString])
            else { return .notFound }
            return .leased(until: Date(timeIntervalSince1970: expiry))
        }
    }

    public func counts(at now: Date) async throws -> [OfflineQueueCounts] {
        let moment = now.timeIntervalSince1970
        return try await read("count the queues") { db in
            var counts: [String: OfflineQueueCounts] = [:]
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT queue,
                        COUNT(CASE WHEN deadAt IS NULL THEN 1 END) AS pending,
                        COUNT(CASE WHEN deadAt IS NULL AND notBefore <= :now
                                   AND (leaseExpiresAt IS NULL OR leaseExpiresAt <= :now) THEN 1 END) AS due,
                        COUNT(CASE WHEN deadAt IS NULL AND leaseExpiresAt > :now THEN 1 END) AS leased,
                        COUNT(CASE WHEN deadAt IS NOT NULL THEN 1 END) AS dead,
                        MIN(CASE WHEN deadAt IS NULL THEN createdAt END) AS oldest
                    FROM entry GROUP BY queue
                    """,
                arguments: ["now": moment]
            )
            for row in rows {
                let queue: String = row["queue"]
                counts[queue] = OfflineQueueCounts(
                    queue: queue, pending: row["pending"], due: row["due"], leased: row["leased"], dead: row["dead"],
                    oldestPendingAt: (row["oldest"] as Double?).map { Date(timeIntervalSince1970: $0) }
                )
            }
            for row in try Row.fetchAll(db, sql: "SELECT queue, pausedAt FROM pausedQueue") {
                let queue: String = row["queue"]
                counts[queue, default: OfflineQueueCounts(queue: queue)].pausedSince = Date(timeIntervalSince1970: row["pausedAt"])
            }
            return counts.values.sorted { $0.queue < $1.queue }
        }
    }

    public func page(queue: String, dead: Bool, after: OfflineEntry.ID?, limit: Int) async throws -> [OfflineEntry] {
        try await read("read a page of entries") { db in
            // Keyset: (deadAt, sequence) after the given entry's, on the queue's indexes.
            let order = dead ? "deadAt, sequence" : "sequence"
            var sql = "SELECT * FROM entry WHERE queue = :queue AND deadAt IS \(dead ? "NOT NULL" : "NULL")"
            var arguments: StatementArguments = ["queue": queue, "limit": max(0, limit)]
            if let after {
                sql += dead
                    ? " AND (deadAt, sequence) > (SELECT deadAt, sequence FROM entry WHERE id = :after AND queue = :queue AND deadAt IS NOT NULL)"
                    : " AND sequence > (SELECT sequence FROM entry WHERE id = :after AND queue = :queue AND deadAt IS NULL)"
                arguments += ["after": after.uuidString]
            }
            sql += " ORDER BY \(order) LIMIT :limit"
            return try Row.fetchAll(db, sql: sql, arguments: arguments).compactMap { Self.lenientEntry($0) }
        }
    }

    public func entry(_ id: OfflineEntry.ID) async throws -> OfflineEntry? {
        try await read("read an entry") { db in
            try Row.fetchOne(db, sql: "SELECT * FROM entry WHERE id = ?", arguments: [id.uuidString]).flatMap { Self.lenientEntry($0) }
        }
    }

    public func deliveries(since: Date) async throws -> [OfflineDeliveryMinute] {
        try await read("read the deliveries per minute") { db in
            try Row.fetchAll(
                db,
                sql: "SELECT queue, minute, delivered, failed FROM deliveryMinute WHERE minute >= ? ORDER BY minute, queue",
                arguments: [Int64((since.timeIntervalSince1970 / 60).rounded(.down))]
            ).map { row in
                OfflineDeliveryMinute(
                    queue: row["queue"], minute: Date(timeIntervalSince1970: Double(row["minute"] as Int64) * 60),
                    delivered: row["delivered"], failed: row["failed"]
                )
            }
        }
    }

    /// Counts an attempt of the leased entry `id` that ended in this minute, in the transaction that
    /// records its end (nothing when the lease is no longer held); drops counts older than a day,
    /// at most once a minute.
    func count(delivered: Bool, id: OfflineEntry.ID, lease: UUID, in db: Database) throws {
        let minute = Int64((Date().timeIntervalSince1970 / 60).rounded(.down))
        try db.cachedStatement(
            sql: """
                INSERT INTO deliveryMinute (queue, minute, delivered, failed)
                SELECT queue, ?, ?, ? FROM entry WHERE id = ? AND leaseToken = ?
                ON CONFLICT (queue, minute) DO UPDATE SET delivered = delivered + excluded.delivered, failed = failed + excluded.failed
                """
        ).execute(arguments: [minute, delivered ? 1 : 0, delivered ? 0 : 1, id.uuidString, lease.uuidString])
        if prunedMinute.exchange(minute, ordering: .relaxed) != minute {
            try db.execute(sql: "DELETE FROM deliveryMinute WHERE minute < ?", arguments: [minute - 24 * 60])
        }
    }
}
