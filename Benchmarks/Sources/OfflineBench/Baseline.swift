import Foundation
import GRDB

/// Raw SQLite through GRDB — the store's own library, without BrickOffline's layers — on the same
/// disk, with the store's settings (WAL, the same `synchronous`, the same table and indexes): the
/// baseline an add is held to.
enum RawSQLite {
    /// Opens a fresh database at `path` with the store's schema.
    static func open(_ path: String, synchronous: String) throws -> DatabasePool {
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = \(synchronous)") }
        let pool = try DatabasePool(path: path, configuration: configuration)
        try pool.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE entry (
                        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                        id TEXT NOT NULL UNIQUE,
                        queue TEXT NOT NULL,
                        payload BLOB NOT NULL,
                        idempotencyKey TEXT NOT NULL,
                        dedupeKey TEXT,
                        createdAt REAL NOT NULL,
                        notBefore REAL NOT NULL,
                        pausedUntil REAL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        maxAttempts INTEGER,
                        expiresAt REAL,
                        leaseToken TEXT,
                        leaseExpiresAt REAL,
                        lastAttemptAt REAL,
                        lastStatus INTEGER,
                        lastError TEXT,
                        deadAt REAL,
                        deadReason TEXT
                    );
                    CREATE INDEX entry_due ON entry(queue, deadAt, notBefore, sequence);
                    CREATE INDEX entry_fifo ON entry(queue, deadAt, sequence);
                    CREATE UNIQUE INDEX entry_dedupe ON entry(queue, dedupeKey)
                        WHERE dedupeKey IS NOT NULL AND deadAt IS NULL;
                    """
            )
        }
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
