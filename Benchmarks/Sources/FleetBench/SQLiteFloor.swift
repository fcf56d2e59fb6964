import BrickOffline
import BrickRequest
import Foundation
import GRDBSQLite
import Synchronization

/// The SQLite queue's deliveries and its raw floor, for the same run as PostgreSQL's.
enum SQLiteDeliveries {
    /// Deliveries/s of a PersistentRequestQueue on a SQLite file (WAL, synchronous=FULL, as the
    /// store's default) to `base`, cap 64.
    static func deliveries(to base: String, total: Int, session: Session) async throws -> Double {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("fleet-bench-sqlite-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await SQLiteOfflineStore.open(name: "hooks", directory: directory)
        let queue = PersistentRequestQueue(name: "hooks", store: store, session: session, simultaneousRequestCap: 64)
        var drafts: [OfflineEntry.Draft] = []
        for index in 0..<total {
            drafts.append(try queue.draft(Post(url: base + "/post?s=\(index)"), options: .init()))
        }
        _ = try await store.add(drafts, dedupe: .reject)
        // The end is seen from the queue's events, not by counting the table (as for PostgreSQL).
        let delivered = Mutex(0)
        let events = queue.events
        let listener = Task {
            for await event in events {
                if case .delivered = event { delivered.withLock { $0 += 1 } }
            }
        }
        let started = ContinuousClock.now
        queue.startProcessing()
        while delivered.withLock({ $0 }) < total { try await Task.sleep(for: .milliseconds(2)) }
        let elapsed = ContinuousClock.now - started
        await queue.close(gracePeriod: .seconds(1))
        listener.cancel()
        let left = try await store.count(queue: "hooks")
        guard left == 0 else { fatalError("\(left) entries left after \(total) deliveries were reported") }
        return Double(total) / seconds(elapsed)
    }

    /// SQLite's C API on a table of the store's shape (WAL, synchronous=FULL): lease 100 due rows
    /// in one transaction, delete them in the next, until none is left; rows/s.
    static func rawFloor(rows: Int) throws -> Double {
        let path = NSTemporaryDirectory() + "fleet-bench-raw-\(getpid()).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        var connection: OpaquePointer?
        guard sqlite3_open(path, &connection) == SQLITE_OK, let db = connection else { throw Failure("cannot open \(path)") }
        defer { sqlite3_close(db) }
        func run(_ sql: String) throws {
            guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
                throw Failure("\(sql): \(String(cString: sqlite3_errmsg(db)))")
            }
        }
        try run("PRAGMA journal_mode=WAL")
        try run("PRAGMA synchronous=FULL")
        try run(
            """
            CREATE TABLE entry (sequence INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, queue TEXT NOT NULL,
                payload BLOB NOT NULL, notBefore REAL NOT NULL, leaseToken TEXT, leaseExpiresAt REAL, deadAt REAL)
            """
        )
        try run("CREATE INDEX entry_due ON entry (queue, deadAt, notBefore)")
        try run("BEGIN")
        try run(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows))
            INSERT INTO entry (id, queue, payload, notBefore) SELECT hex(randomblob(16)), 'raw', zeroblob(600), 0 FROM n
            """
        )
        try run("COMMIT")
        func prepare(_ sql: String) throws -> OpaquePointer {
            var statement: OpaquePointer?
            guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
                throw Failure("\(sql): \(String(cString: sqlite3_errmsg(db)))")
            }
            return statement
        }
        let lease = try prepare(
            """
            UPDATE entry SET leaseToken = ?1, leaseExpiresAt = ?2
            WHERE sequence IN (SELECT sequence FROM entry WHERE queue = 'raw' AND deadAt IS NULL AND leaseToken IS NULL
                               AND notBefore <= ?2 ORDER BY notBefore LIMIT 100)
            RETURNING sequence
            """
        )
        let remove = try prepare("DELETE FROM entry WHERE sequence = ?1")
        defer {
            sqlite3_finalize(lease)
            sqlite3_finalize(remove)
        }
        let started = ContinuousClock.now
        var removed = 0
        while true {
            try run("BEGIN IMMEDIATE")
            let token = UUID().uuidString
            sqlite3_bind_text(lease, 1, token, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            sqlite3_bind_double(lease, 2, Date().timeIntervalSince1970)
            var sequences: [Int64] = []
            while sqlite3_step(lease) == SQLITE_ROW { sequences.append(sqlite3_column_int64(lease, 0)) }
            sqlite3_reset(lease)
            try run("COMMIT")
            if sequences.isEmpty { break }
            try run("BEGIN IMMEDIATE")
            for sequence in sequences {
                sqlite3_bind_int64(remove, 1, sequence)
                guard sqlite3_step(remove) == SQLITE_DONE else { throw Failure(String(cString: sqlite3_errmsg(db))) }
                sqlite3_reset(remove)
            }
            try run("COMMIT")
            removed += sequences.count
        }
        let elapsed = ContinuousClock.now - started
        guard removed == rows else { throw Failure("removed \(removed) of \(rows)") }
        return Double(rows) / seconds(elapsed)
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
