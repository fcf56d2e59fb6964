import BrickOffline
import Foundation
import GRDB

/// Raw SQLite through GRDB — the store's own library, without BrickOffline's layers — on the same
/// disk, with the store's settings (WAL, the same `synchronous`, the store's own table and indexes):
/// the baseline an add is held to.
enum RawSQLite {
    /// A fresh database at `path` with the store's own schema — made by opening a
    /// `SQLiteOfflineStore` there (its migrations), then opened again by GRDB alone, with the
    /// store's `synchronous`.
    static func open(_ path: String, synchronous: String) throws -> DatabasePool {
        let url = URL(fileURLWithPath: path)
        let name = url.deletingPathExtension().lastPathComponent
        _ = try SQLiteOfflineStore(name: name, directory: url.deletingLastPathComponent())
        let pool = try DatabasePool(path: path)
        // Set on the writer once the pool is made, and read back: a `prepareDatabase` setting is
        // reset to NORMAL on a DatabasePool's writer (GRDB 7), which made this baseline's FULL a
        // NORMAL until 2026-11-28, as it did the store's own.
        let level = try pool.writeWithoutTransaction { db -> Int in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
            return try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
        }
        let expected = ["OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3][synchronous.uppercased()]
        guard level == expected else { fatalError("synchronous is \(level), not \(synchronous)") }
        return pool
    }

    /// As ``adds(at:synchronous:total:perCommit:payload:)`` with one row per commit, each through
    /// GRDB's async write (a hop to its writer queue and back), from a task.
    static func asyncAdds(at path: String, synchronous: String, total: Int, payload: Int) async throws -> Double {
        let pool = try open(path, synchronous: synchronous)
        let bytes = Data(repeating: 0x5A, count: payload)
        let start = ContinuousClock.now
        for _ in 0..<total {
            try await pool.write { db in
                let now = Date().timeIntervalSince1970
                try db.cachedStatement(
                    sql: "INSERT INTO entry (id, queue, payload, idempotencyKey, createdAt, notBefore) VALUES (?, ?, ?, ?, ?, ?)"
                ).execute(arguments: [UUID().uuidString, "raw", bytes, UUID().uuidString, now, now])
            }
        }
        let elapsed = ContinuousClock.now - start
        return Double(total) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// Inserts `total` rows of a `payload`-byte payload, `perCommit` to a transaction, from one
    /// writer; returns rows per second.
    static func adds(at path: String, synchronous: String, total: Int, perCommit: Int, payload: Int) throws -> Double {
        let pool = try open(path, synchronous: synchronous)
        let bytes = Data(repeating: 0x5A, count: payload)
        let start = ContinuousClock.now
        var written = 0
        while written < total {
            let batch = min(perCommit, total - written)
            try pool.write { db in
                let statement = try db.cachedStatement(
                    sql: """
                        INSERT INTO entry (id, queue, payload, idempotencyKey, createdAt, notBefore)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """
                )
                for _ in 0..<batch {
                    let now = Date().timeIntervalSince1970
                    try statement.execute(arguments: [
                        UUID().uuidString, "raw", bytes, UUID().uuidString, now, now,
                    ])
                }
            }
            written += batch
        }
        let elapsed = ContinuousClock.now - start
        return Double(total) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
}
