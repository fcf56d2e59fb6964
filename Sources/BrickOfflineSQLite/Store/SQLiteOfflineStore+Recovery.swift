import BrickOfflineCore
import Foundation
import GRDB

/// Opening a store file without owning it (an operator's tool), and carrying what a damaged file
/// still holds into the new store a worker makes in its place.
extension SQLiteOfflineStore {
    /// What an operator's tool does with a store file it opens.
    package enum InspectionAccess: Sendable {
        /// Reads only: no lock taken, nothing migrated, recovered or written — beside a running
        /// worker too (SQLite's WAL lets readers beside a writer).
        case read
        /// Changes entries (retry, remove, pause): the store's lock is taken (the worker must be
        /// stopped), but the file is still never migrated, recovered, moved or repaired.
        case change
    }

    /// The store at `path` opened for an operator's tool: never migrated, never moved aside, its
    /// leases and damaged rows left as they are. A damaged file is refused with
    /// ``OfflineStoreError/Kind/corrupt`` and left untouched; a file that cannot be read for
    /// its permissions with ``OfflineStoreError/Kind/io`` (never "corrupt").
    ///
    /// - Throws: ``OfflineStoreError``: `.io` with "open elsewhere" for ``InspectionAccess/change``
    ///   while a worker holds the store.
    package static func inspecting(atPath path: String, access: InspectionAccess) throws -> SQLiteOfflineStore {
        try checkReadable(path)
        // Checked read-only first: a damaged file is refused before any connection that could
        // write to it (a checkpoint at close) is opened.
        do {
            var configuration = Configuration()
            configuration.readonly = true
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            try queue.read(SQLiteFiles.quickCheck)
            try queue.close()
        } catch {
            throw storeError(error, doing: "open \(path)")
        }
        var lockDescriptor: Int32 = -1
        if access == .change {
            guard let descriptor = try tryLock(path + ".lock") else {
                throw OfflineStoreError(
                    .io,
                    message: "the store \(path) is open in a running worker: stop it to change entries (reads work beside it), or change them in the console mounted in that worker"
                )
            }
            lockDescriptor = descriptor
        }
        do {
            var configuration = Configuration()
            configuration.label = "BrickOffline.inspection"
            configuration.readonly = access == .read
            configuration.busyMode = .timeout(Double(defaultBusyTimeoutMilliseconds) / 1000)
            let pool = try DatabasePool(path: path, configuration: configuration)
            try pool.read(SQLiteFiles.quickCheck)
            return SQLiteOfflineStore(inspecting: path, pool: pool, lockDescriptor: lockDescriptor)
        } catch {
            if lockDescriptor >= 0 { close(lockDescriptor) }
            throw storeError(error, doing: "open \(path)")
        }
    }

    /// `.io` naming the reason when the file cannot be opened (permissions, a directory) —
    /// before SQLite reports it as damaged, and a worker moves a sound file aside for it. A
    /// missing file passes when `creating` (a new store).
    static func checkReadable(_ path: String, creating: Bool = false) throws(OfflineStoreError) {
        let descriptor = Glibc.open(path, (creating ? O_RDWR : O_RDONLY) | O_CLOEXEC)
        guard descriptor >= 0 else {
            let reason = errno
            if reason == ENOENT && creating { return }
            throw OfflineStoreError(.io, message: "cannot \(creating ? "open" : "read") \(path): \(String(cString: strerror(reason)))")
        }
        close(descriptor)
    }

    /// What was carried from a damaged file into the new store made in its place.
    struct Carried {
        var entries = 0
        /// Entries the damaged file counted that could not be read; `nil` when not even its count
        /// could be read.
        var unreadable: Int?
    }

    /// Copies every entry (and paused queue) still readable in the damaged file `aside` into the
    /// new store `pool`, leases cleared: acknowledged entries survive a damaged page elsewhere in
    /// the file. Rows are read by sequence, stepping past a damaged stretch.
    static func carryOver(from aside: String, into pool: DatabasePool) -> Carried {
        var carried = Carried()
        var configuration = Configuration()
        configuration.readonly = true
        guard let damaged = try? DatabaseQueue(path: aside, configuration: configuration) else { return carried }
        let counted = try? damaged.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM entry") }
        let columns = (try? damaged.read { db in try db.columns(in: "entry").map(\.name) }) ?? []
        let known = Set(["sequence", "id", "queue", "payload", "idempotencyKey", "dedupeKey", "createdAt", "notBefore", "pausedUntil",
                         "attempts", "maxAttempts", "expiresAt", "lastAttemptAt", "lastStatus", "lastError", "deadAt", "deadReason"])
        let copied = columns.filter(known.contains)
        guard copied.contains("sequence") else {
            carried.unreadable = counted.flatMap { $0 }
            return carried
        }
        let list = copied.joined(separator: ", ")
        let insert = "INSERT OR IGNORE INTO entry (\(list)) VALUES (\(copied.map { _ in "?" }.joined(separator: ", ")))"
        var after: Int64 = .min
        var skip: Int64 = 1
        var failures = 0
        while failures < 64 {
            do {
                let rows = try damaged.read { db in
                    try Row.fetchAll(db, sql: "SELECT \(list) FROM entry WHERE sequence > ? ORDER BY sequence LIMIT 500", arguments: [after])
                }
                guard let last = rows.last?["sequence"] as? Int64 else { break }
                let inserted = try pool.write { db -> Int in
                    var count = 0
                    for row in rows {
                        try db.execute(sql: insert, arguments: StatementArguments(copied.map { row[$0] as DatabaseValue }))
                        count += db.changesCount
                    }
                    return count
                }
                carried.entries += inserted
                after = last
                skip = 1
            } catch {
                // A damaged page: step past it, further each time.
                failures += 1
                after = after == .min ? 0 : after.addingReportingOverflow(skip).partialValue
                skip = skip.multipliedReportingOverflow(by: 2).overflow ? skip : skip * 2
            }
        }
        if let paused = try? damaged.read({ db in try Row.fetchAll(db, sql: "SELECT queue, pausedAt FROM pausedQueue") }) {
            _ = try? pool.write { db in
                for row in paused {
                    try db.execute(sql: "INSERT OR IGNORE INTO pausedQueue (queue, pausedAt) VALUES (?, ?)",
                                   arguments: [row["queue"] as DatabaseValue, row["pausedAt"] as DatabaseValue])
                }
            }
        }
        if let counted = counted.flatMap({ $0 }) { carried.unreadable = max(0, counted - carried.entries) }
        return carried
    }
}
