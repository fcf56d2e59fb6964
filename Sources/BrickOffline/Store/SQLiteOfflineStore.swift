import BrickRequest
import Foundation
import GRDB

/// The embedded ``OfflineStore``: one SQLite database file per store, through GRDB.
///
/// - **Durability.** WAL, `synchronous=FULL` by default: an `add` that returned is in the
///   database file and its log, synced; it survives the process being killed (any setting does)
///   and, on storage that honours `fsync`, power loss. `.normal` survives the process being killed
///   but may lose the last commits on power loss, for about 15 times the commit rate.
/// - **Group commit.** Concurrent `add`s share one transaction and one sync
///   (``GroupCommit``); each returns only after that commit.
/// - **One process.** The store takes an exclusive lock on `NAME.sqlite.lock`: a second process
///   opening it gets ``OfflineStoreError/Kind/io``. Leases left by a process that died are
///   released when the store opens, so what was in flight is due again at once.
/// - **Files.** `DIRECTORY/NAME.sqlite` (with `-wal` and `-shm`), mode 0600, in a directory made
///   with mode 0700. A file that is not a database or is damaged is moved aside to
///   `NAME.sqlite.corrupt-TIMESTAMP` (never deleted) and a new, empty store is made;
///   ``recoveredFile`` says where the old one went.
/// - **Scale.** Opening reads no entry; counts, leases and the next due date are index lookups.
public final class SQLiteOfflineStore: OfflineStore {
    /// How hard each commit is synced.
    public enum Synchronous: Sendable, Hashable {
        /// Every commit synced (`PRAGMA synchronous=FULL`): survives power loss. The default.
        case full
        /// The log synced at checkpoints only (`NORMAL`): survives the process being killed.
        case normal
    }

    /// The database file.
    public let path: String
    /// Where a damaged file found at open was moved, if one was.
    public let recoveredFile: String?

    private let pool: DatabasePool
    private let groupCommit = GroupCommit()
    private let lockDescriptor: Int32

    /// Opens (or creates) the store `name` in `directory`.
    ///
    /// - Parameters:
    ///   - name: The store's name: letters, digits, `-`, `_` and `.`.
    ///   - directory: Where its files live; created (mode 0700) when missing.
    ///   - synchronous: How hard each commit is synced. Default ``Synchronous/full``.
    /// - Throws: ``OfflineStoreError``.
    public init(name: String, directory: URL, synchronous: Synchronous = .full) throws {
        guard !name.isEmpty, name.utf8.allSatisfy({ $0.isStoreNameByte }) else {
            throw OfflineStoreError(.io, message: "invalid store name \(name.debugDescription)")
        }
        try Self.makeDirectory(directory.path)
        path = directory.appendingPathComponent(name + ".sqlite").path
        lockDescriptor = try Self.lock(path + ".lock")
        do {
            var recovered: String? = nil
            var opened: DatabasePool
            do {
                opened = try Self.open(path, synchronous: synchronous)
            } catch let error as DatabaseError
                where error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
            {
                let file = path
                recovered = try SQLiteFiles.moveAside(file) {
                    OfflineStoreError(.io, message: "cannot move the damaged store \(file) aside: \($0)")
                }
                opened = try Self.open(path, synchronous: synchronous)
            }
            pool = opened
            recoveredFile = recovered
        } catch {
            close(lockDescriptor)
            throw Self.storeError(error, doing: "open \(path)")
        }
    }

    deinit {
        close(lockDescriptor)
    }

    // MARK: - Opening

    private static func makeDirectory(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(
                atPath: path,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700]
            )
        } catch {
            throw OfflineStoreError(.io, message: "cannot create the directory \(path): \(error.localizedDescription)")
        }
    }

    private static func lock(_ path: String) throws -> Int32 {
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw OfflineStoreError(.io, message: "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        // A store being closed (a queue just dropped, a process just killed) lets go within
        // moments: wait up to 2 s for it before refusing.
        for attempt in 0..<200 {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return descriptor }
            if attempt < 199 { usleep(10_000) }
        }
        close(descriptor)
        throw OfflineStoreError(
            .io,
            message: "the store \(path) is open elsewhere (another process, or another store object in this one)"
        )
    }

    private static func open(_ path: String, synchronous: Synchronous) throws -> DatabasePool {
        SQLiteFiles.createPrivate(path)
        var configuration = Configuration()
        configuration.label = "BrickOffline"
        configuration.busyMode = .timeout(5)
        let mode = synchronous == .full ? "FULL" : "NORMAL"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(mode)")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        try pool.write(SQLiteFiles.quickCheck)
        try migrator.migrate(pool)
        // One process owns this file (the lock): leases of a process that died are void.
        try pool.write { db in
            try db.execute(sql: "UPDATE entry SET leaseToken = NULL, leaseExpiresAt = NULL WHERE leaseToken IS NOT NULL")
        }
        return pool
    }

    private static let migrator: DatabaseMigrator = {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
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
        return migrator
    }()

    // MARK: - Errors

    static func storeError(_ error: any Error, doing what: String) -> OfflineStoreError {
        if let error = error as? OfflineStoreError { return error }
        guard let error = error as? DatabaseError else {
            return OfflineStoreError(.io, message: "cannot \(what): \(error)")
        }
        switch error.resultCode {
        case .SQLITE_FULL:
            return OfflineStoreError(.diskFull, message: "cannot \(what): the disk is full")
        case .SQLITE_CORRUPT, .SQLITE_NOTADB:
            return OfflineStoreError(.corrupt, message: "cannot \(what): the store is damaged (\(error.resultCode))")
        case .SQLITE_IOERR where error.extendedResultCode.rawValue == 13 | (4 << 8):
            return OfflineStoreError(.diskFull, message: "cannot \(what): the disk is full")
        default:
            return OfflineStoreError(.io, message: "cannot \(what): \(error.message ?? "\(error.resultCode)")")
        }
    }

    private func write<T: Sendable>(_ what: String, _ updates: @Sendable @escaping (Database) throws -> T) async throws -> T {
        do {
            return try await pool.write(updates)
        } catch {
            throw Self.storeError(error, doing: what)
        }
    }

    private func read<T: Sendable>(_ what: String, _ value: @Sendable @escaping (Database) throws -> T) async throws -> T {
        do {
            return try await pool.read(value)
        } catch {
            throw Self.storeError(error, doing: what)
        }
    }

    // MARK: - OfflineStore

    public func add(_ drafts: [OfflineEntry.Draft], dedupe: DedupePolicy) async throws -> [OfflineEntry.ID] {
        try await groupCommit.submit(GroupCommit.Batch(drafts: drafts, dedupe: dedupe)) { batches in
            // One transaction for every waiting batch; each batch in its own savepoint, so a
            // duplicate refuses only its own batch.
            do {
                return try await self.pool.write { db -> [Result<[OfflineEntry.ID], OfflineStoreError>] in
                    var results: [Result<[OfflineEntry.ID], OfflineStoreError>] = []
                    for batch in batches {
                        var outcome: Result<[OfflineEntry.ID], OfflineStoreError> = .success([])
                        try db.inSavepoint {
                            do {
                                outcome = .success(try Self.insert(batch, into: db))
                                return .commit
                            } catch let refusal as OfflineStoreError {
                                outcome = .failure(refusal)
                                return .rollback
                            }
                        }
                        results.append(outcome)
                    }
                    return results
                }
            } catch {
                let failure = Self.storeError(error, doing: "add entries")
                return batches.map { _ in .failure(failure) }
            }
        }
    }

    private static func insert(_ batch: GroupCommit.Batch, into db: Database) throws -> [OfflineEntry.ID] {
        for draft in batch.drafts {
            if let key = draft.dedupeKey,
                let existing = try Row.fetchOne(
                    db,
                    sql: "SELECT id, leaseToken FROM entry WHERE queue = ? AND dedupeKey = ? AND deadAt IS NULL",
                    arguments: [draft.queue, key]
                )
            {
                let leased: String? = existing["leaseToken"]
                if batch.dedupe == .reject || leased != nil {
                    throw OfflineStoreError(
                        .duplicate,
                        message: leased != nil
                            ? "an entry with dedupe key \(key.debugDescription) is being attempted"
                            : "an entry with dedupe key \(key.debugDescription) is pending"
                    )
                }
                try db.execute(sql: "DELETE FROM entry WHERE id = ?", arguments: [existing["id"] as String])
            }
            try db.execute(
                sql: """
                    INSERT INTO entry (id, queue, payload, idempotencyKey, dedupeKey, createdAt, notBefore,
                                       maxAttempts, expiresAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    draft.id.uuidString, draft.queue, draft.payload, draft.idempotencyKey, draft.dedupeKey,
                    draft.createdAt.timeIntervalSince1970, draft.notBefore.timeIntervalSince1970,
                    draft.maxAttempts, draft.expiresAt?.timeIntervalSince1970,
                ]
            )
        }
        return batch.drafts.map(\.id)
    }

    public func lease(queue: String, limit: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        let token = UUID().uuidString
        let moment = now.timeIntervalSince1970
        let expiry = moment + duration.seconds
        // Looked for first without the write lock, so that a worker with nothing due does not
        // hold up concurrent adds.
        let due = try await read("look for due entries") { db in
            try Bool.fetchOne(
                db,
                sql: """
                    SELECT EXISTS (SELECT 1 FROM entry
                    WHERE queue = ? AND deadAt IS NULL AND notBefore <= ?
                      AND (leaseToken IS NULL OR leaseExpiresAt <= ?))
                    """,
                arguments: [queue, moment, moment]
            ) ?? false
        }
        guard due else { return [] }
        return try await write("lease entries") { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM entry
                    WHERE queue = ? AND deadAt IS NULL AND notBefore <= ?
                      AND (leaseToken IS NULL OR leaseExpiresAt <= ?)
                    ORDER BY sequence LIMIT ?
                    """,
                arguments: [queue, moment, moment, limit]
            )
            var leased: [OfflineEntry] = []
            for row in rows {
                try db.execute(
                    sql: "UPDATE entry SET leaseToken = ?, leaseExpiresAt = ? WHERE sequence = ?",
                    arguments: [token, expiry, row["sequence"] as Int64]
                )
                leased.append(
                    Self.entry(row, lease: OfflineEntry.Lease(token: UUID(uuidString: token)!, expiresAt: Date(timeIntervalSince1970: expiry)))
                )
            }
            return leased
        }
    }

    public func leaseHead(queue: String, now: Date, for duration: Duration) async throws -> OfflineEntry? {
        let token = UUID()
        let moment = now.timeIntervalSince1970
        let expiry = moment + duration.seconds
        return try await write("lease the head entry") { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT * FROM entry WHERE queue = ? AND deadAt IS NULL ORDER BY sequence LIMIT 1",
                    arguments: [queue]
                )
            else { return nil }
            let leaseExpiry: Double? = row["leaseExpiresAt"]
            let notBefore: Double = row["notBefore"]
            if notBefore > moment || (leaseExpiry.map { $0 > moment } ?? false) { return nil }
            try db.execute(
                sql: "UPDATE entry SET leaseToken = ?, leaseExpiresAt = ? WHERE sequence = ?",
                arguments: [token.uuidString, expiry, row["sequence"] as Int64]
            )
            return Self.entry(row, lease: OfflineEntry.Lease(token: token, expiresAt: Date(timeIntervalSince1970: expiry)))
        }
    }

    public func replacePending(
        queue: String,
        ids: [OfflineEntry.ID],
        with drafts: [OfflineEntry.Draft]
    ) async throws -> Bool {
        try await write("replace pending entries") { db in
            var first: Int64? = nil
            for id in ids {
                guard
                    let row = try Row.fetchOne(
                        db,
                        sql: "SELECT sequence FROM entry WHERE id = ? AND queue = ? AND deadAt IS NULL AND leaseToken IS NULL",
                        arguments: [id.uuidString, queue]
                    )
                else { return false }
                let sequence: Int64 = row["sequence"]
                first = min(first ?? sequence, sequence)
            }
            for id in ids { try db.execute(sql: "DELETE FROM entry WHERE id = ?", arguments: [id.uuidString]) }
            // The replacements go where the first replaced entry was: before everything added after it.
            var sequence = first ?? 0
            let later = try Int64.fetchAll(
                db,
                sql: "SELECT sequence FROM entry WHERE queue = ? AND sequence > ? ORDER BY sequence DESC",
                arguments: [queue, sequence]
            )
            // Make room: move the later entries up by the number of replacements.
            for existing in later {
                try db.execute(
                    sql: "UPDATE entry SET sequence = ? WHERE sequence = ?",
                    arguments: [existing + Int64(drafts.count), existing]
                )
            }
            for draft in drafts {
                try db.execute(
                    sql: """
                        INSERT INTO entry (sequence, id, queue, payload, idempotencyKey, dedupeKey, createdAt,
                                           notBefore, maxAttempts, expiresAt)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        first == nil ? nil : sequence, draft.id.uuidString, draft.queue, draft.payload,
                        draft.idempotencyKey, draft.dedupeKey, draft.createdAt.timeIntervalSince1970,
                        draft.notBefore.timeIntervalSince1970, draft.maxAttempts, draft.expiresAt?.timeIntervalSince1970,
                    ]
                )
                sequence += 1
            }
            return true
        }
    }

    public func setAside(_ ids: [OfflineEntry.ID], reason: String, now: Date) async throws {
        try await write("set entries aside") { db in
            for id in ids {
                try db.execute(
                    sql: "UPDATE entry SET deadAt = ?, deadReason = ? WHERE id = ? AND deadAt IS NULL AND leaseToken IS NULL",
                    arguments: [now.timeIntervalSince1970, reason, id.uuidString]
                )
            }
        }
    }

    public func extend(_ id: OfflineEntry.ID, lease: UUID, until expiry: Date) async throws -> Bool {
        try await write("extend a lease") { db in
            try db.execute(
                sql: "UPDATE entry SET leaseExpiresAt = ? WHERE id = ? AND leaseToken = ?",
                arguments: [expiry.timeIntervalSince1970, id.uuidString, lease.uuidString]
            )
            return db.changesCount == 1
        }
    }

    public func complete(_ id: OfflineEntry.ID, lease: UUID) async throws -> Bool {
        try await write("remove a delivered entry") { db in
            try db.execute(
                sql: "DELETE FROM entry WHERE id = ? AND leaseToken = ?",
                arguments: [id.uuidString, lease.uuidString]
            )
            return db.changesCount == 1
        }
    }

    public func reschedule(
        _ id: OfflineEntry.ID,
        lease: UUID,
        notBefore: Date,
        attempt: OfflineEntry.AttemptRecord,
        countsAttempt: Bool
    ) async throws -> Bool {
        try await write("reschedule an entry") { db in
            try db.execute(
                sql: """
                    UPDATE entry SET leaseToken = NULL, leaseExpiresAt = NULL,
                        notBefore = MAX(notBefore, ?), pausedUntil = ?, attempts = attempts + ?,
                        lastAttemptAt = ?, lastStatus = ?, lastError = ?
                    WHERE id = ? AND leaseToken = ?
                    """,
                arguments: [
                    notBefore.timeIntervalSince1970, notBefore.timeIntervalSince1970, countsAttempt ? 1 : 0,
                    attempt.date.timeIntervalSince1970, attempt.status, attempt.error,
                    id.uuidString, lease.uuidString,
                ]
            )
            return db.changesCount == 1
        }
    }

    public func bury(
        _ id: OfflineEntry.ID,
        lease: UUID,
        reason: String,
        attempt: OfflineEntry.AttemptRecord?,
        countsAttempt: Bool
    ) async throws -> Bool {
        let now = Date().timeIntervalSince1970
        return try await write("set an entry aside") { db in
            try db.execute(
                sql: """
                    UPDATE entry SET leaseToken = NULL, leaseExpiresAt = NULL, deadAt = ?, deadReason = ?,
                        attempts = attempts + ?,
                        lastAttemptAt = COALESCE(?, lastAttemptAt), lastStatus = COALESCE(?, lastStatus),
                        lastError = COALESCE(?, lastError)
                    WHERE id = ? AND leaseToken = ?
                    """,
                arguments: [
                    attempt?.date.timeIntervalSince1970 ?? now, reason, countsAttempt ? 1 : 0,
                    attempt?.date.timeIntervalSince1970, attempt?.status, attempt?.error,
                    id.uuidString, lease.uuidString,
                ]
            )
            return db.changesCount == 1
        }
    }

    public func clearPauses(queue: String, now: Date) async throws {
        let moment = now.timeIntervalSince1970
        try await write("clear pauses") { db in
            // Only pauses: a scheduled entry's own `notBefore` is later than its pause, or it has none.
            try db.execute(
                sql: """
                    UPDATE entry SET notBefore = ?, pausedUntil = NULL
                    WHERE queue = ? AND deadAt IS NULL AND pausedUntil IS NOT NULL AND notBefore > ?
                      AND notBefore <= pausedUntil
                    """,
                arguments: [moment, queue, moment]
            )
        }
    }

    public func nextDue(queue: String) async throws -> Date? {
        try await read("find the next due entry") { db in
            try Double.fetchOne(
                db,
                sql: "SELECT MIN(notBefore) FROM entry WHERE queue = ? AND deadAt IS NULL AND leaseToken IS NULL",
                arguments: [queue]
            ).map { Date(timeIntervalSince1970: $0) }
        }
    }

    public func count(queue: String) async throws -> Int {
        try await read("count entries") { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM entry WHERE queue = ? AND deadAt IS NULL", arguments: [queue])
                ?? 0
        }
    }

    public func list(queue: String) async throws -> [OfflineEntry] {
        try await read("list entries") { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM entry WHERE queue = ? AND deadAt IS NULL ORDER BY sequence",
                arguments: [queue]
            ).map { Self.entry($0) }
        }
    }

    public func deadLetters(queue: String) async throws -> [OfflineEntry] {
        try await read("list dead letters") { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM entry WHERE queue = ? AND deadAt IS NOT NULL ORDER BY deadAt, sequence",
                arguments: [queue]
            ).map { Self.entry($0) }
        }
    }

    public func retryDeadLetter(_ id: OfflineEntry.ID, now: Date) async throws {
        try await write("retry a dead letter") { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT * FROM entry WHERE id = ? AND deadAt IS NOT NULL",
                    arguments: [id.uuidString]
                )
            else { throw OfflineStoreError(.notFound, message: "no dead letter \(id)") }
            // Re-inserted at the end of its queue: a new sequence, attempts from zero.
            try db.execute(sql: "DELETE FROM entry WHERE id = ?", arguments: [id.uuidString])
            try db.execute(
                sql: """
                    INSERT INTO entry (id, queue, payload, idempotencyKey, dedupeKey, createdAt, notBefore,
                                       maxAttempts, expiresAt, lastAttemptAt, lastStatus, lastError)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)
                    """,
                arguments: [
                    row["id"] as String, row["queue"] as String, row["payload"] as Data,
                    row["idempotencyKey"] as String, row["dedupeKey"] as String?, row["createdAt"] as Double,
                    now.timeIntervalSince1970, row["maxAttempts"] as Int?, row["lastAttemptAt"] as Double?,
                    row["lastStatus"] as Int?, row["lastError"] as String?,
                ]
            )
        }
    }

    public func remove(_ id: OfflineEntry.ID) async throws {
        try await write("remove an entry") { db in
            try db.execute(sql: "DELETE FROM entry WHERE id = ?", arguments: [id.uuidString])
        }
    }

    public func removeAll(queue: String) async throws {
        try await write("remove all entries") { db in
            try db.execute(sql: "DELETE FROM entry WHERE queue = ?", arguments: [queue])
        }
    }

    /// `PRAGMA integrity_check`: `"ok"` for a sound file (for tests and diagnostics).
    public func integrityCheck() async throws -> String {
        try await read("check integrity") { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "" }
    }

    // MARK: - Rows

    private static func entry(_ row: Row, lease: OfflineEntry.Lease? = nil) -> OfflineEntry {
        let leaseToken: String? = row["leaseToken"]
        let leaseExpiry: Double? = row["leaseExpiresAt"]
        let lastAttemptAt: Double? = row["lastAttemptAt"]
        let deadAt: Double? = row["deadAt"]
        return OfflineEntry(
            id: UUID(uuidString: row["id"]) ?? UUID(),
            queue: row["queue"],
            sequence: row["sequence"],
            payload: row["payload"],
            idempotencyKey: row["idempotencyKey"],
            dedupeKey: row["dedupeKey"],
            createdAt: Date(timeIntervalSince1970: row["createdAt"]),
            notBefore: Date(timeIntervalSince1970: row["notBefore"]),
            attempts: row["attempts"],
            maxAttempts: row["maxAttempts"],
            expiresAt: (row["expiresAt"] as Double?).map { Date(timeIntervalSince1970: $0) },
            lease: lease
                ?? leaseToken.flatMap { token in
                    UUID(uuidString: token).map {
                        OfflineEntry.Lease(token: $0, expiresAt: Date(timeIntervalSince1970: leaseExpiry ?? 0))
                    }
                },
            lastAttempt: lastAttemptAt.map {
                OfflineEntry.AttemptRecord(
                    date: Date(timeIntervalSince1970: $0),
                    status: row["lastStatus"],
                    error: row["lastError"]
                )
            },
            deadLetter: deadAt.map {
                OfflineEntry.DeadLetter(date: Date(timeIntervalSince1970: $0), reason: row["deadReason"] ?? "")
            }
        )
    }
}

extension UInt8 {
    var isStoreNameByte: Bool {
        switch self {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
            return true
        default:
            return false
        }
    }
}
