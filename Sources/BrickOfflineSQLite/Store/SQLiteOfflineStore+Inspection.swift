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
}
