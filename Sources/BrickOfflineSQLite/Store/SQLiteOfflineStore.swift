import BrickOfflineCore
import BrickRequest
import Foundation
import GRDB
import Synchronization

/// The embedded ``OfflineStore``: one SQLite database file per store, through GRDB.
///
/// - **Durability.** WAL, `synchronous=FULL` by default: an `add` that returned is in the
///   database file and its log, synced; it survives the process being killed (any setting does)
///   and, on storage that honours `fsync`, power loss. `.normal` survives the process being killed
///   but may lose the last commits on power loss, for about 15 times the commit rate.
/// - **Group commit.** Concurrent `add`s share one transaction and one sync
///   (`GroupCommit`); each returns only after that commit. The commit runs on the thread of the
///   task whose `add` started it (the others wait suspended, then one of them commits the next
///   batch): no hop to a writer queue and back, so an add costs little more than SQLite's own
///   insert and sync. That thread is busy for the commit's sync (tens of microseconds on an SSD,
///   milliseconds on slow flash), as with any synchronous write — but never waits there for
///   SQLite's write lock: when another connection holds it (a `sqlite3` shell, a backup), the
///   round goes to GRDB's writer queue, which waits up to 5 s while the adding tasks are
///   suspended, and the cooperative threads stay free.
/// - **One process.** The store takes an exclusive lock on `NAME.sqlite.lock`: a second process
///   opening it gets ``OfflineStoreError/Kind/io``. Leases left by a process that died are
///   released when the store opens, so what was in flight is due again at once.
/// - **Files.** `DIRECTORY/NAME.sqlite` (with `-wal` and `-shm`), mode 0600, in a directory made
///   with mode 0700. A file that is not a database or is damaged is moved aside to
///   `NAME.sqlite.corrupt-TIMESTAMP` (never deleted) and a new, empty store is made;
///   ``recoveredFile`` says where the old one went. A row that does not hold a valid entry is set
///   aside as a dead letter with the reason (``damagedRowsSetAside``), never trapped on.
/// - **Scale.** Opening runs SQLite's `quick_check` and one scan of the pending rows for ones no
///   query could reach (about 0.4 µs per row; `docs/Guide.md`, "Offline delivery"); counts, leases and the next due
///   date are index lookups.
public final class SQLiteOfflineStore: OfflineStore {
    /// How hard each commit is synced.
    public enum Synchronous: Sendable, Hashable {
        /// Every commit synced (`PRAGMA synchronous=FULL`): an add that returned survives power
        /// loss (`PowerLossTests`: 20 cuts, no acknowledged add lost). The default.
        case full
        /// The log synced at checkpoints only (`NORMAL`): an add that returned survives the process
        /// being killed; a power cut leaves the store intact but loses the adds since the last
        /// checkpoint (SQLite's, every 1,000 pages of log) — in `PowerLossTests`, all of a short
        /// run's. For queues whose entries can be made again.
        case normal
    }

    /// The database file.
    public let path: String
    /// Where a damaged file found at open was moved, if one was.
    public let recoveredFile: String?
    /// How many entries were carried from that damaged file into this store (every row still
    /// readable in it, leases cleared); 0 when none was found.
    public let recoveredEntries: Int
    /// How many entries the damaged file counted but that could not be read (lost with its
    /// damaged pages, kept in ``recoveredFile`` for a forensic look); `nil` when not even its count
    /// could be read (a file that is not a database at all), 0 when none was found.
    public let unreadableEntries: Int?
    /// How many damaged rows (a wrongly typed column, a NULL, an id that is not a UUID) were set
    /// aside as dead letters since the store opened (when it opened, or when they were leased),
    /// each with its reason.
    public var damagedRowsSetAside: Int { damagedRows.load(ordering: .relaxed) }
    let damagedRows = Atomic<Int>(0)
    /// The minute the per-minute delivery counts were last pruned in (at most once a minute).
    let prunedMinute = Atomic<Int64>(0)
    /// The queues' loops in this process waiting to be woken by a change made beside them (a
    /// resume, a dead letter put back): by queue, then by listener.
    let localWakeUps = Mutex([String: [UUID: AsyncStream<Void>.Continuation]]())
    /// Group commits written again, each batch in a savepoint, because one of their batches was
    /// refused (for tests: the path a duplicate among concurrent adds takes).
    package let savepointRounds = Atomic<Int>(0)
    /// Group-commit rounds that found SQLite's write lock held elsewhere and went to the writer
    /// queue to wait (for tests and diagnostics).
    package let busyHandoffs = Atomic<Int>(0)
    /// How long a write waits for SQLite's lock held by another connection, unless opened with
    /// another (``open(name:directory:synchronous:busyTimeoutMilliseconds:)``, for tests).
    static let defaultBusyTimeoutMilliseconds = 5000
    /// How long this store's writes wait for SQLite's lock held by another connection.
    let busyTimeoutMilliseconds: Int

    let pool: DatabasePool
    package let groupCommit = GroupCommit()
    /// The attempts' outcomes, written together (SQLiteOfflineStore+Outcomes.swift).
    let outcomeCommit = GroupCommitter<OutcomeWrite, Bool>(maxBatch: 500)
    private let lockDescriptor: Int32

    /// Opens (or creates) the store `name` in `directory`.
    ///
    /// When another store object of this process still holds the file (a queue just dropped, whose
    /// tasks are ending), this waits up to 2 s for it, blocking the calling thread; from a task,
    /// prefer ``open(name:directory:synchronous:)``, which waits without blocking one (on a
    /// 2-core machine, two blocked threads can be every thread that would let the old store go).
    ///
    /// - Parameters:
    ///   - name: The store's name: letters, digits, `-`, `_` and `.`.
    ///   - directory: Where its files live; created (mode 0700) when missing.
    ///   - synchronous: How hard each commit is synced. Default ``Synchronous/full``.
    /// - Throws: ``OfflineStoreError``.
    public convenience init(name: String, directory: URL, synchronous: Synchronous = .full) throws {
        let path = try Self.path(name: name, directory: directory)
        var descriptor: Int32? = nil
        for attempt in 0..<Self.lockAttempts {
            descriptor = try Self.tryLock(path + ".lock")
            if descriptor != nil { break }
            if attempt < Self.lockAttempts - 1 { usleep(10_000) }
        }
        guard let descriptor else { throw Self.heldElsewhere(path) }
        try self.init(
            path: path,
            lockDescriptor: descriptor,
            synchronous: synchronous,
            busyTimeoutMilliseconds: Self.defaultBusyTimeoutMilliseconds
        )
    }

    /// Opens (or creates) the store `name` in `directory`, as ``init(name:directory:synchronous:)``
    /// does, but waits for a store object of this process that still holds the file (up to 2 s)
    /// without blocking the calling thread.
    ///
    /// - Parameters:
    ///   - name: The store's name: letters, digits, `-`, `_` and `.`.
    ///   - directory: Where its files live; created (mode 0700) when missing.
    ///   - synchronous: How hard each commit is synced. Default ``Synchronous/full``.
    /// - Returns: The store.
    /// - Throws: ``OfflineStoreError``.
    public static func open(name: String, directory: URL, synchronous: Synchronous = .full) async throws
        -> SQLiteOfflineStore
    {
        try await open(name: name, directory: directory, synchronous: synchronous, busyTimeoutMilliseconds: defaultBusyTimeoutMilliseconds)
    }

    /// ``open(name:directory:synchronous:)`` with another wait for a write lock held by another
    /// connection than the 5 s every store uses (for tests that hold it on purpose on a loaded
    /// machine).
    package static func open(
        name: String,
        directory: URL,
        synchronous: Synchronous = .full,
        busyTimeoutMilliseconds: Int
    ) async throws -> SQLiteOfflineStore {
        let path = try Self.path(name: name, directory: directory)
        for attempt in 0..<lockAttempts {
            if let descriptor = try tryLock(path + ".lock") {
                return try SQLiteOfflineStore(
                    path: path,
                    lockDescriptor: descriptor,
                    synchronous: synchronous,
                    busyTimeoutMilliseconds: busyTimeoutMilliseconds
                )
            }
            if attempt < lockAttempts - 1 { try await Task.sleep(for: .milliseconds(10)) }
        }
        throw heldElsewhere(path)
    }

    /// 200 tries, 10 ms apart: a store being closed (a queue just dropped, a process just killed)
    /// lets go within moments.
    private static let lockAttempts = 200

    /// The database's path, the name checked and the directory made.
    private static func path(name: String, directory: URL) throws -> String {
        try OfflineEntry.checkQueueName(name)
        guard name.utf8.allSatisfy({ $0.isStoreNameByte }) else {
            throw OfflineStoreError(.invalidName, message: "invalid store name \(name.debugDescription): letters, digits, -, _ and . only")
        }
        try Self.makeDirectory(directory.path)
        return directory.appendingPathComponent(name + ".sqlite").path
    }

    private static func heldElsewhere(_ path: String) -> OfflineStoreError {
        OfflineStoreError(
            .io,
            message: "the store \(path) is open elsewhere (another process, or another store object in this one)"
        )
    }

    /// Opens the store at `path`, whose lock `lockDescriptor` holds (closed here on failure).
    private init(path: String, lockDescriptor: Int32, synchronous: Synchronous, busyTimeoutMilliseconds: Int) throws {
        self.path = path
        self.lockDescriptor = lockDescriptor
        self.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        do {
            var recovered: String? = nil
            var carried = Carried(entries: 0, unreadable: 0)
            var opened: (DatabasePool, Int)
            do {
                try Self.checkReadable(path, creating: true)
                opened = try Self.open(path, synchronous: synchronous, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
            } catch let error as DatabaseError
                where error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
            {
                let file = path
                let aside = try SQLiteFiles.moveAside(file) {
                    OfflineStoreError(.io, message: "cannot move the damaged store \(file) aside: \($0)")
                }
                recovered = aside
                opened = try Self.open(path, synchronous: synchronous, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
                carried = Self.carryOver(from: aside, into: opened.0)
                opened.1 += try opened.0.write { db in try Self.repairRows(in: db) }
            }
            pool = opened.0
            damagedRows.store(opened.1, ordering: .relaxed)
            recoveredFile = recovered
            recoveredEntries = carried.entries
            unreadableEntries = carried.unreadable
        } catch {
            close(lockDescriptor)
            throw Self.storeError(error, doing: "open \(path)")
        }
    }

    /// A store an operator's tool opened (``inspecting(atPath:access:)``): nothing recovered.
    init(inspecting path: String, pool: DatabasePool, lockDescriptor: Int32) {
        self.path = path
        self.pool = pool
        self.lockDescriptor = lockDescriptor
        busyTimeoutMilliseconds = Self.defaultBusyTimeoutMilliseconds
        recoveredFile = nil
        recoveredEntries = 0
        unreadableEntries = 0
    }

    deinit {
        if lockDescriptor >= 0 { close(lockDescriptor) }
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

    /// The lock file's descriptor, locked; `nil` while another holds the lock.
    static func tryLock(_ path: String) throws -> Int32? {
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw OfflineStoreError(.io, message: "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return descriptor }
        close(descriptor)
        return nil
    }

    private static func open(_ path: String, synchronous: Synchronous, busyTimeoutMilliseconds: Int) throws -> (DatabasePool, Int) {
        SQLiteFiles.createPrivate(path)
        var configuration = Configuration()
        configuration.label = "BrickOffline"
        configuration.busyMode = .timeout(Double(busyTimeoutMilliseconds) / 1000)
        let mode = synchronous == .full ? "FULL" : "NORMAL"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(mode)")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        // GRDB's pool sets `synchronous = NORMAL` on its writer once WAL is on, after
        // `prepareDatabase` ran: `.full` was silently NORMAL, and a power cut lost acknowledged
        // adds (PowerLossTests). Set again on the writer, and read back.
        let level = try pool.writeWithoutTransaction { db -> Int in
            try db.execute(sql: "PRAGMA synchronous = \(mode)")
            return try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1
        }
        guard level == (synchronous == .full ? 2 : 1) else {
            throw OfflineStoreError(.io, message: "SQLite kept synchronous = \(level) on \(path), not \(mode)")
        }
        try pool.write(SQLiteFiles.quickCheck)
        // Checked and applied in one immediate write transaction: openers of a new file take turns.
        try schema.apply(to: pool)
        // One process owns this file (the lock): leases of a process that died are void. Rows that
        // do not hold a valid entry (a damaged or foreign file) are set aside with the reason.
        let damaged = try pool.write { db -> Int in
            try db.execute(sql: "UPDATE entry SET leaseToken = NULL, leaseExpiresAt = NULL WHERE leaseToken IS NOT NULL")
            return try repairRows(in: db)
        }
        return (pool, damaged)
    }

    /// The migrations this build applies, by identifier, in order: a file whose `grdb_migrations`
    /// lacks one of them was written by an older release.
    package static var migrationIdentifiers: [String] { schema.migrations.map(\.identifier) }

    /// The migrations the file at `path` has had, read-only and without opening it as a store (so
    /// without migrating it): for an operator's tool. Empty for a file that holds no store.
    ///
    /// - Throws: ``OfflineStoreError`` when the file cannot be read as SQLite.
    package static func appliedMigrations(atPath path: String) throws -> Set<String> {
        do {
            var configuration = Configuration()
            configuration.readonly = true
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            return try queue.read { db in
                guard try db.tableExists("grdb_migrations") else { return [] }
                return Set(try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
            }
        } catch {
            try checkReadable(path)
            throw OfflineStoreError(.corrupt, message: "\(path) cannot be read as a SQLite store: \(error)")
        }
    }

    private static let schema = SQLiteSchema(migrations: [
        SQLiteSchema.Migration(identifier: "v1") { db in
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
        },
        SQLiteSchema.Migration(identifier: "v2: paused queues") { db in
            try db.execute(sql: "CREATE TABLE pausedQueue (queue TEXT NOT NULL PRIMARY KEY, pausedAt REAL NOT NULL)")
        },
        SQLiteSchema.Migration(identifier: "v3: deliveries per minute") { db in
            try db.execute(
                sql: """
                    CREATE TABLE deliveryMinute (
                        queue TEXT NOT NULL, minute INTEGER NOT NULL,
                        delivered INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (queue, minute)
                    ) WITHOUT ROWID
                    """
            )
        },
    ])

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

    func write<T: Sendable>(_ what: String, _ updates: @Sendable @escaping (Database) throws -> T) async throws -> T {
        do {
            return try await pool.write(updates)
        } catch {
            throw Self.storeError(error, doing: what)
        }
    }

    func read<T: Sendable>(_ what: String, _ value: @Sendable @escaping (Database) throws -> T) async throws -> T {
        do {
            return try await pool.read(value)
        } catch {
            throw Self.storeError(error, doing: what)
        }
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
