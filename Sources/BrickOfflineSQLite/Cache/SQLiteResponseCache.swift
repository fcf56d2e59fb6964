import BrickOfflineCore
@_spi(TransportImplementation) import BrickRequest
import Foundation
import GRDB
import HTTPTypes
import Logging
import Synchronization
import Dispatch

/// A `BrickRequest.ResponseCache` on disk: responses survive restarts, and several processes may
/// share one cache.
///
/// ```swift
/// let cache = try SQLiteResponseCache(name: "api")
/// let session = Session(configuration: .init(responseCache: cache))
/// ```
///
/// - **Files.** `DIRECTORY/NAME.cache.sqlite` (SQLite in WAL mode, through GRDB, mode 0600) and,
///   for bodies larger than ``fileThreshold``, one file each in `DIRECTORY/NAME.cache-bodies/`,
///   written under a temporary name and renamed into place before the row that names it commits:
///   a reader never sees a half-written entry, and a process killed mid-write leaves at most an
///   unreferenced file, swept at a later open. `DIRECTORY/NAME.cache.lock` (empty) lets openers
///   of one file — threads and processes — take turns creating, migrating and checking it.
/// - **Size.** ``maxBytes`` bounds bodies, header fields and keys together; storing past it evicts
///   the least recently used responses, by the cache's own index. A read writes nothing: it notes
///   the use in memory, and the next store (which is the write that evicts) records the uses in
///   its own transaction, before evicting; so does ``flush()``. Uses noted since the last of
///   those are forgotten if the process ends (eviction order then falls back to the last
///   recorded). A response larger than a quarter of the bound is not stored.
/// - **Names and versions.** Caches of different names share nothing. Opening a cache with a
///   ``version`` other than the one it was written with drops every entry (a new app version
///   whose responses no longer decode).
/// - **Damage.** A file that is not a database or fails its check on two opens in a row (never
///   while another opener is creating it: openers take turns) is moved aside to
///   `NAME.cache.sqlite.corrupt-TIMESTAMP` and a new, empty cache is made; ``recoveredFile`` says
///   where the old one went. A row that does not decode (a wrongly typed column, a NULL), a body
///   file that is missing, of the wrong size or does not match the checksum kept in its row, is a
///   miss: the row is removed and reported (``damagedRowsRemoved``, a warning in the log). Body
///   files are named by the cache; a row naming any other path is never read, nor its file deleted.
/// - **Writes off the request's path.** Stores, removals and recency run on the cache's own
///   writer (one serial queue), never on the caller's thread — which may be a transport's thread.
///   This object's reads see them at once; other processes once written (``flush()``).
/// - **Errors.** `BrickRequest.BrickError` with `BrickRequest.BrickError.Code.storage` for
///   reads; a write that fails is logged and reported by the next ``flush()``. The session treats
///   a failing cache as a miss, except under `BrickRequest.CachePolicy.cacheOnly`.
public final class SQLiteResponseCache: ResponseCache {
    /// The default bound: 128 MiB.
    public static let defaultMaxBytes = 128 * 1024 * 1024
    /// Bodies larger than this many bytes go to files of their own by default: 64 KiB.
    public static let defaultFileThreshold = 64 * 1024

    /// The database file.
    public let path: String
    /// The directory of body files.
    public let bodiesDirectory: String
    /// The bound in bytes.
    public let maxBytes: Int
    /// The version the cache was opened with.
    public let version: Int
    /// Bodies larger than this go to files.
    public let fileThreshold: Int
    /// Where a damaged file found at open was moved, if one was.
    public let recoveredFile: String?

    /// The most bytes of responses waiting for the writer; a store past it is skipped. 32 MiB.
    public let maxPendingBytes = 32 * 1024 * 1024

    let pool: DatabasePool
    /// The hits' connections: read-only, their statement prepared once (``CacheReaders``).
    let readers: CacheReaders
    /// A shared `flock` on `NAME.cache.users`, held while this cache is open: an opener that finds
    /// the file damaged moves it aside only when no other opener holds one.
    private let users: Int32
    private let damagedRows = Atomic<Int>(0)
    let logger = Logger(label: "BrickOffline.SQLiteResponseCache")
    /// The cache's own writer: every write runs here, in order (``flush()``).
    let writer = DispatchQueue(label: "brick-cache-writer")
    /// Writes handed to the writer and not applied yet, as reads must see them.
    let pending = Lock(PendingWrites())
    /// Rows read since their use was last recorded, with when: written by the next store or
    /// `flush()`, never by a read.
    let recentUses = Lock([Int64: Double]())
    /// The header blocks of rows read, parsed, by row id (``parsedHeadersKept`` at most).
    let parsed = Lock([Int64: ParsedHeaders]())
    /// How many parsed header blocks are kept.
    static let parsedHeadersKept = 512

    /// Opens (or creates) the cache `name` in `directory`.
    ///
    /// - Parameters:
    ///   - name: The cache's name: letters, digits, `-`, `_` and `.`.
    ///   - directory: Where its files live; created (mode 0700) when missing. Default
    ///     ``PersistentRequestQueue/defaultDirectory``.
    ///   - maxBytes: The bound. Default ``defaultMaxBytes``.
    ///   - version: Entries written with another version are dropped at open. Default 0.
    ///   - fileThreshold: Bodies larger than this go to files. Default ``defaultFileThreshold``.
    /// - Throws: `BrickRequest.BrickError` (`BrickRequest.BrickError.Code.storage`).
    public init(
        name: String,
        directory: URL? = nil,
        maxBytes: Int = SQLiteResponseCache.defaultMaxBytes,
        version: Int = 0,
        fileThreshold: Int = SQLiteResponseCache.defaultFileThreshold
    ) throws(BrickError) {
        guard !name.isEmpty, name.utf8.allSatisfy({ $0.isStoreNameByte }) else {
            throw BrickError(.storage, message: "invalid cache name \(name.debugDescription)")
        }
        let directory = (directory ?? PersistentRequestQueue.defaultDirectory).path
        path = directory + "/" + name + ".cache.sqlite"
        bodiesDirectory = directory + "/" + name + ".cache-bodies"
        self.maxBytes = max(0, maxBytes)
        self.version = version
        self.fileThreshold = max(0, fileThreshold)
        var heldUsers: Int32 = -1
        do {
            for made in [directory, bodiesDirectory] {
                try FileManager.default.createDirectory(
                    atPath: made,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700]
                )
            }
            // Openers of one file take turns (threads and processes): one creates and migrates
            // it, or finds it damaged and moves it aside, while no other is half-way through
            // creating it — a file another opener is creating is never taken for a damaged one.
            let file = path
            let users = SQLiteFiles.holdShared(directory + "/" + name + ".cache.users")
            heldUsers = users
            self.users = users
            let (opened, recovered) = try SQLiteFiles.whileLocked(directory + "/" + name + ".cache.lock") {
                () throws -> (DatabasePool, String?) in
                do {
                    return (try Self.open(file), nil)
                } catch let error as DatabaseError
                    where error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
                {
                    // Another opener reads and writes this file meanwhile: what looked damaged was
                    // its WAL index mid-reset under load (a whole suite's), not damage. Moving it
                    // aside would pull the files from under that opener (it then found its tables
                    // gone) and throw a good cache away: try again, and fail rather than move it.
                    if !SQLiteFiles.isSoleUser(users) {
                        return (try Self.open(file, othersUseIt: true), nil)
                    }
                    let moved = try SQLiteFiles.moveAside(file) {
                        BrickError(.storage, message: "cannot move the damaged cache \(file) aside: \($0)")
                    }
                    return (try Self.open(file), moved)
                }
            }
            pool = opened
            readers = CacheReaders(path: path)
            recoveredFile = recovered
        } catch {
            if heldUsers >= 0 { close(heldUsers) }
            throw Self.storageError(error, doing: "open \(path)")
        }
        // The first write can meet what the open can (another process's last connection closing
        // and resetting the WAL index): transient, tried again within the open's 5 s.
        let deadline = ContinuousClock.now + .seconds(5)
        var dropped: [String] = []
        while true {
            do {
                dropped = try dropIfOtherVersion()
                break
            } catch where ContinuousClock.now < deadline && Self.isTransient(error) {
                usleep(10_000)
            }
        }
        for file in dropped { unlink(bodiesDirectory + "/" + file) }
        sweepOrphanFiles()
    }

    deinit {
        // The connections first (the last one checkpoints, removes the `-wal` file and resets the
        // index), then the lock: an opener that then finds itself alone finds no close under way,
        // so what it reads as damage is damage. The read-only connections close before the pool's:
        // the last connection to close checkpoints, which a read-only one cannot.
        readers.close()
        try? pool.close()
        if users >= 0 { close(users) }
    }

    // MARK: - ResponseCache

    /// The stored responses for `key`, most recently stored first (those not written yet
    /// included). A response whose row or body file is damaged is left out, and removed.
    public func cachedResponses(for key: CacheKey) throws(BrickError) -> [CachedResponse] {
        let overlay = pendingView(for: key)
        var responses = overlay.stores
        if overlay.hidesDisk { return responses }
        let now = Date().timeIntervalSince1970
        let overlaid = Set(responses.map(\.variant))
        var used: [Int64] = []
        var damaged: [(id: Int64, reason: String)] = []
        do {
            try readers.withConnection { connection in
                try connection.rows(for: key.description) { row in
                    guard let id = try? row[.id].integer() else { return }
                    let response: CachedResponse
                    do throws(DamagedRow) {
                        response = try self.response(from: row, id: id, key: key)
                    } catch {
                        damaged.append((id, error.reason))
                        return
                    }
                    // A store not written yet replaces what is on disk for its variant.
                    if overlaid.contains(response.variant) { return }
                    responses.append(response)
                    used.append(id)
                }
            }
        } catch {
            throw Self.storageError(error, doing: "read \(key)")
        }
        if !damaged.isEmpty { removeDamaged(damaged, key: key) }
        // Noted in memory only: the next store records it (see `Size` above).
        if !used.isEmpty { recentUses.withLock { uses in for id in used { uses[id] = now } } }
        return responses
    }

    /// Stores `response`, replacing the one with the same key and variant, and evicts the least
    /// recently used responses until the cache is within ``maxBytes``. The write happens on the
    /// cache's own writer (see ``flush()``); this object's reads see it at once. A response larger
    /// than a quarter of ``maxBytes`` is not stored; neither is one that would take the writer's
    /// backlog past ``maxPendingBytes``.
    public func store(_ response: CachedResponse) throws(BrickError) {
        guard response.byteCount <= maxBytes / 4 else { return }
        enqueue(.store(response))
    }

    /// Writes stored responses — their body files (when large), their rows and one eviction — in one
    /// transaction and one commit. On the writer.
    func write(_ responses: [CachedResponse]) throws(BrickError) {
        var bodyFiles: [String?] = []
        var digests: [Int64?] = []
        do throws(BrickError) {
            for response in responses {
                if response.body.count > fileThreshold {
                    bodyFiles.append(try writeBodyFile(response.body))
                    digests.append(Self.digest(response.body))
                } else {
                    bodyFiles.append(nil)
                    digests.append(nil)
                }
            }
        } catch {
            for case let file? in bodyFiles { unlink(bodiesDirectory + "/" + file) }
            throw error
        }
        let now = Date().timeIntervalSince1970
        let maxBytes = self.maxBytes
        let files = bodyFiles
        let sums = digests
        let removedFiles: [String]
        let uses = recentUses.withLock { uses in
            defer { uses = [:] }
            return uses
        }
        do {
            removedFiles = try pool.write { db -> [String] in
                // The uses noted since the last store, before eviction reads the order.
                try Self.recordUses(uses, in: db)
                var removed: [String] = []
                for (index, response) in responses.enumerated() {
                    removed += Self.deletableFiles(
                        try Row.fetchAll(
                            db,
                            sql: "SELECT bodyFile FROM response WHERE cacheKey = ? AND variant = ?",
                            arguments: [response.key.description, response.variant]
                        )
                    )
                    try db.execute(
                        sql: """
                            INSERT OR REPLACE INTO response
                                (cacheKey, variant, status, headers, body, bodyFile, bodyDigest, bodySize, url,
                                 requestTime, responseTime, storedAt, size, lastAccess)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            response.key.description, response.variant, response.status, Data(response.rawHeaders),
                            files[index] == nil ? response.body : nil, files[index], sums[index], response.body.count,
                            response.url, response.requestTime.timeIntervalSince1970,
                            response.responseTime.timeIntervalSince1970, now, response.byteCount, now,
                        ]
                    )
                }
                removed += try Self.evict(db, toFit: maxBytes)
                return removed
            }
        } catch {
            for case let file? in bodyFiles { unlink(bodiesDirectory + "/" + file) }
            throw Self.storageError(error, doing: "store \(responses.count) responses")
        }
        for file in removedFiles { unlink(bodiesDirectory + "/" + file) }
    }

    /// Removes every stored response for `key` (on the writer; this object's reads see it at once).
    public func removeCachedResponses(for key: CacheKey) throws(BrickError) {
        enqueue(.remove(key))
    }

    /// Removes every stored response (on the writer; this object's reads see it at once).
    public func removeAll() throws(BrickError) {
        enqueue(.removeAll)
    }

    // MARK: - Inspection

    /// Rows found damaged on reading (a wrongly typed column, a body file that is not this cache's
    /// or does not match its checksum) and removed, since the cache was opened. Each is also logged.
    public var damagedRowsRemoved: Int { damagedRows.load(ordering: .relaxed) }

    /// Removes rows that did not decode, and reports each: a damaged store is a miss, never a trap.
    private func removeDamaged(_ rows: [(id: Int64, reason: String)], key: CacheKey) {
        for row in rows {
            logger.warning("a damaged cache row was removed", metadata: ["brick.cache.key": "\(key)", "brick.reason": "\(row.reason)"])
        }
        damagedRows.add(rows.count, ordering: .relaxed)
        enqueue(.removeRows(rows.map(\.id)))
    }

    /// How many responses are stored (once the pending writes are applied).
    public func count() throws(BrickError) -> Int {
        writer.sync {}
        do {
            return try pool.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM response") ?? 0 }
        } catch {
            throw Self.storageError(error, doing: "count")
        }
    }

    /// The bytes the stored responses take, as the bound counts them.
    public func totalBytes() throws(BrickError) -> Int {
        writer.sync {}
        do {
            return try pool.read { try Self.totalBytes($0) }
        } catch {
            throw Self.storageError(error, doing: "measure")
        }
    }

    /// SQLite's `PRAGMA integrity_check`: `"ok"`, or what is wrong.
    public func integrityCheck() throws(BrickError) -> String {
        do {
            return try pool.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") ?? "" }
        } catch {
            throw Self.storageError(error, doing: "check")
        }
    }

    // MARK: - Opening

    /// - Parameters:
    ///   - path: The database file.
    ///   - othersUseIt: Another opener has the file open: what looks damaged is taken for a
    ///     transient read until the deadline.
    private static func open(_ path: String, othersUseIt: Bool = false) throws -> DatabasePool {
        // Openers take turns (the caller's lock), but a connection that opens while another
        // process's last connection closes (removing the `-wal` file and resetting the `-shm`
        // index, which no opener's lock covers) can see SQLITE_BUSY, SQLITE_IOERR or
        // SQLITE_PROTOCOL once, and — reading the WAL index mid-reset — even SQLITE_CORRUPT. All
        // pass: try again, for as long as a busy writer would be waited for (the busy timeout,
        // 5 s). Damage is concluded only when it is seen on two opens in a row; an error that
        // lasts is reported after the deadline.
        let deadline = ContinuousClock.now + .seconds(5)
        var attempt = 0
        var damageSeen = false
        while true {
            do {
                return try openOnce(path)
            } catch let error as DatabaseError where ContinuousClock.now < deadline {
                switch error.resultCode {
                case .SQLITE_BUSY, .SQLITE_IOERR, .SQLITE_PROTOCOL:
                    break
                case .SQLITE_CORRUPT, .SQLITE_NOTADB:
                    if damageSeen && !othersUseIt { throw error }
                    damageSeen = true
                default:
                    throw error
                }
                attempt += 1
                usleep(UInt32(min(5_000 * attempt, 50_000)))
            }
        }
    }

    private static func openOnce(_ path: String) throws -> DatabasePool {
        SQLiteFiles.createPrivate(path)
        var configuration = Configuration()
        configuration.label = "BrickOffline.ResponseCache"
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            // A cache: losing the last commits on power loss is acceptable; a kill -9 loses nothing.
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        try pool.read(SQLiteFiles.quickCheck)
        // Checked and applied in one immediate write transaction: openers of a new file take turns.
        try schema.apply(to: pool)
        return pool
    }

    private static let schema = SQLiteSchema(migrations: [
        SQLiteSchema.Migration(identifier: "v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta (name TEXT PRIMARY KEY, value);
                    CREATE TABLE response (
                        id INTEGER PRIMARY KEY,
                        cacheKey TEXT NOT NULL,
                        variant TEXT NOT NULL,
                        status INTEGER NOT NULL,
                        headers BLOB NOT NULL,
                        body BLOB,
                        bodyFile TEXT,
                        bodySize INTEGER NOT NULL,
                        url TEXT NOT NULL,
                        requestTime REAL NOT NULL,
                        responseTime REAL NOT NULL,
                        storedAt REAL NOT NULL,
                        size INTEGER NOT NULL,
                        lastAccess REAL NOT NULL,
                        UNIQUE (cacheKey, variant)
                    );
                    CREATE INDEX response_recency ON response(lastAccess, id);
                    CREATE TABLE total (id INTEGER PRIMARY KEY CHECK (id = 0), bytes INTEGER NOT NULL);
                    INSERT INTO total (id, bytes) VALUES (0, 0);
                    CREATE TRIGGER response_added AFTER INSERT ON response
                        BEGIN UPDATE total SET bytes = bytes + NEW.size; END;
                    CREATE TRIGGER response_removed AFTER DELETE ON response
                        BEGIN UPDATE total SET bytes = bytes - OLD.size; END;
                    CREATE TRIGGER response_resized AFTER UPDATE OF size ON response
                        BEGIN UPDATE total SET bytes = bytes - OLD.size + NEW.size; END;
                    """
            )
        },
        SQLiteSchema.Migration(identifier: "v2: body checksums") { db in
            // Rows stored before carry none: their body files are misses until stored again.
            try db.execute(sql: "ALTER TABLE response ADD COLUMN bodyDigest INTEGER")
        },
    ])
}
