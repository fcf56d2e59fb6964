// Over 450 lines: every entry requirement of OfflineStore on SQLite, one statement each, read side by side with the PostgreSQL store's.
import BrickOfflineCore
import BrickRequest
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The entries: what ``OfflineStore`` asks of the embedded store, one SQLite transaction each.
extension SQLiteOfflineStore {
    public func add(_ drafts: [OfflineEntry.Draft], dedupe: DedupePolicy) async throws -> [OfflineEntry.ID] {
        for queue in Set(drafts.map(\.queue)) { try OfflineEntry.checkQueueName(queue) }
        return try await groupCommit.submit(GroupCommit.Batch(drafts: drafts, dedupe: dedupe)) { batches in
            // One transaction for every waiting batch, written on the committer's thread (a hop to
            // GRDB's writer queue and back would cost more than the commit) — but never waiting
            // there for SQLite's write lock: another connection holding it (a `sqlite3` shell, a
            // backup) would hold a cooperative thread for up to the busy timeout. Busy, the round
            // goes to GRDB's writer queue, which waits (the busy timeout) while this task is
            // suspended. A refusal (a duplicate) must refuse only its own batch: batches are first
            // written together, and only when one is refused — rare — is the transaction rolled
            // back and written again with each batch in a savepoint of its own (two statements per
            // batch the common case does without), on the writer queue.
            do {
                return try Self.commitHere(batches, pool: self.pool, busyTimeoutMilliseconds: self.busyTimeoutMilliseconds)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
                self.busyHandoffs.add(1, ordering: .relaxed)
                do {
                    return try await self.pool.write { db -> [BatchResult] in
                        try batches.map { .success(try Self.insert($0, into: db)) }
                    }
                } catch is OfflineStoreError where batches.count > 1 {
                    self.savepointRounds.add(1, ordering: .relaxed)
                    return await Self.addEachInSavepoint(batches, pool: self.pool)
                } catch {
                    return Self.failingAll(batches, error)
                }
            } catch is OfflineStoreError where batches.count > 1 {
                self.savepointRounds.add(1, ordering: .relaxed)
                return await Self.addEachInSavepoint(batches, pool: self.pool)
            } catch {
                return Self.failingAll(batches, error)
            }
        }
    }

    /// Writes `batches` in one transaction on this thread, failing with `SQLITE_BUSY` at once when
    /// another connection holds the write lock (synchronous: GRDB's blocking write, not its async one).
    private static func commitHere(
        _ batches: [GroupCommit.Batch],
        pool: DatabasePool,
        busyTimeoutMilliseconds: Int
    ) throws -> [BatchResult] {
        try pool.writeWithoutTransaction { db -> [BatchResult] in
            try withoutWaitingForLocks(db, busyTimeoutMilliseconds: busyTimeoutMilliseconds) {
                var results: [BatchResult] = []
                try db.inTransaction(.immediate) {
                    results = try batches.map { .success(try insert($0, into: db)) }
                    return .commit
                }
                return results
            }
        }
    }

    /// Runs `body` with SQLite's busy timeout at zero (a lock held elsewhere fails at once with
    /// `SQLITE_BUSY`), then sets it back to the store's `busyTimeoutMilliseconds`.
    private static func withoutWaitingForLocks<T>(
        _ db: Database,
        busyTimeoutMilliseconds: Int,
        _ body: () throws -> T
    ) throws -> T {
        // The C call, not a PRAGMA statement: nothing to parse on every commit. (The busy timeout
        // GRDB's `busyMode` sets is the same setting.)
        sqlite3_busy_timeout(db.sqliteConnection, 0)
        defer { sqlite3_busy_timeout(db.sqliteConnection, Int32(busyTimeoutMilliseconds)) }
        return try body()
    }

    /// Writes `batches` in one transaction, each in a savepoint, so that a refused batch leaves the
    /// others written; on GRDB's writer queue (this task suspended while it waits for the lock).
    private static func addEachInSavepoint(_ batches: [GroupCommit.Batch], pool: DatabasePool) async -> [BatchResult] {
        do {
            return try await pool.write { db -> [BatchResult] in
                var results: [BatchResult] = []
                for batch in batches {
                    var outcome: BatchResult = .success([])
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
            return failingAll(batches, error)
        }
    }

    /// One batch's outcome in a group commit.
    typealias BatchResult = Result<[OfflineEntry.ID], OfflineStoreError>

    /// `error` for every batch of a round that failed as a whole (a refusal as it is).
    private static func failingAll(_ batches: [GroupCommit.Batch], _ error: any Error) -> [BatchResult] {
        let failure = error as? OfflineStoreError ?? storeError(error, doing: "add entries")
        return batches.map { _ in .failure(failure) }
    }

    private static func insert(_ batch: GroupCommit.Batch, into db: Database) throws -> [OfflineEntry.ID] {
        for draft in batch.drafts {
            if let key = draft.dedupeKey,
                let existing = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT sequence, leaseToken FROM entry WHERE queue = ? AND dedupeKey = ? AND deadAt IS NULL"),
                    arguments: [draft.queue, key]
                )
            {
                let leased = existing["leaseToken"] as? String
                if batch.dedupe == .reject || leased != nil {
                    throw OfflineStoreError(
                        .duplicate,
                        message: leased != nil
                            ? "an entry with dedupe key \(key.debugDescription) is being attempted"
                            : "an entry with dedupe key \(key.debugDescription) is pending"
                    )
                }
                try db.execute(sql: "DELETE FROM entry WHERE sequence = ?", arguments: [existing["sequence"] as? Int64])
            }
            try db.cachedStatement(
                sql: """
                    INSERT INTO entry (id, queue, payload, idempotencyKey, dedupeKey, createdAt, notBefore,
                                       maxAttempts, expiresAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(
                arguments: [
                    draft.id.uuidString, draft.queue, draft.payload, draft.idempotencyKey, draft.dedupeKey,
                    draft.createdAt.timeIntervalSince1970, draft.notBefore.timeIntervalSince1970,
                    draft.maxAttempts, draft.expiresAt?.timeIntervalSince1970,
                ]
            )
        }
        return batch.drafts.map(\.id)
    }

    public func lease(queue: String, limit: Int, cap: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        let token = UUID().uuidString
        let moment = now.timeIntervalSince1970
        let expiry = moment + duration.seconds
        // Looked for first without the write lock, so that a worker with nothing due does not
        // hold up concurrent adds.
        let due = try await read("look for due entries") { db in
            // Cached statements on the per-delivery paths: compiling one (and GRDB's authorizer
            // walk over it) cost more than running it.
            try Bool.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT EXISTS (SELECT 1 FROM entry
                        WHERE queue = ? AND deadAt IS NULL AND notBefore <= ?
                          AND (leaseToken IS NULL OR leaseExpiresAt <= ?))
                        """
                ),
                arguments: [queue, moment, moment]
            ) ?? false
        }
        guard due else { return [] }
        return try await write("lease entries") { db in
            var limit = limit
            if cap < Int.max {
                let held = try Int.fetchOne(
                    db.cachedStatement(sql: "SELECT COUNT(*) FROM entry WHERE queue = ? AND deadAt IS NULL AND leaseExpiresAt > ?"),
                    arguments: [queue, moment]
                ) ?? 0
                limit = min(limit, cap - held)
            }
            guard limit > 0 else { return [] }
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT * FROM entry
                        WHERE queue = ? AND deadAt IS NULL AND notBefore <= ?
                          AND (leaseToken IS NULL OR leaseExpiresAt <= ?)
                        ORDER BY sequence LIMIT ?
                        """
                ),
                arguments: [queue, moment, moment, limit]
            )
            let take = try db.cachedStatement(sql: "UPDATE entry SET leaseToken = ?, leaseExpiresAt = ? WHERE sequence = ?")
            var leased: [OfflineEntry] = []
            let lease = OfflineEntry.Lease(token: UUID(uuidString: token)!, expiresAt: Date(timeIntervalSince1970: expiry))
            for row in rows {
                let entry: OfflineEntry
                do {
                    entry = try Self.entry(row, lease: lease)
                } catch let damaged as DamagedRow {
                    // Damaged since the store opened: set aside, never handed out.
                    try Self.setAside(row, reason: damaged.reason, in: db)
                    self.damagedRows.add(1, ordering: .relaxed)
                    continue
                }
                try take.execute(arguments: [token, expiry, entry.sequence])
                leased.append(entry)
            }
            return leased
        }
    }

    public func leaseHead(queue: String, now: Date, for duration: Duration) async throws -> OfflineEntry? {
        let token = UUID()
        let moment = now.timeIntervalSince1970
        let expiry = moment + duration.seconds
        return try await write("lease the head entry") { db -> OfflineEntry? in
            while true {
                guard
                    let row = try Row.fetchOne(
                        db,
                        sql: "SELECT * FROM entry WHERE queue = ? AND deadAt IS NULL ORDER BY sequence LIMIT 1",
                        arguments: [queue]
                    )
                else { return nil }
                let head: OfflineEntry
                do {
                    head = try Self.entry(row)
                } catch let damaged as DamagedRow {
                    let error = damaged
                    // Damaged since the store opened: set aside; the next one is the head.
                    try Self.setAside(row, reason: error.reason, in: db)
                    self.damagedRows.add(1, ordering: .relaxed)
                    continue
                }
                let leaseExpiry = head.lease?.expiresAt.timeIntervalSince1970
                if head.notBefore.timeIntervalSince1970 > moment || (leaseExpiry.map { $0 > moment } ?? false) { return nil }
                try db.execute(
                    sql: "UPDATE entry SET leaseToken = ?, leaseExpiresAt = ? WHERE sequence = ?",
                    arguments: [token.uuidString, expiry, head.sequence]
                )
                return try Self.entry(row, lease: OfflineEntry.Lease(token: token, expiresAt: Date(timeIntervalSince1970: expiry)))
            }
        }
    }

    public func replacePending(
        queue: String,
        ids: [OfflineEntry.ID],
        with drafts: [OfflineEntry.Draft]
    ) async throws -> Bool {
        for queue in Set(drafts.map(\.queue)) { try OfflineEntry.checkQueueName(queue) }
        return try await write("replace pending entries") { db in
            var first: Int64? = nil
            for id in ids {
                guard
                    let row = try Row.fetchOne(
                        db,
                        sql: "SELECT sequence FROM entry WHERE id = ? AND queue = ? AND deadAt IS NULL AND leaseToken IS NULL",
                        arguments: [id.uuidString, queue]
                    )
                else { return false }
                guard let sequence = row["sequence"] as? Int64 else { return false }
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
        try await write("extend a lease") { db in try Self.extend(id, lease: lease, until: expiry, in: db) }
    }

    /// Every lease still held extended to `now + duration`, in one transaction.
    public func extend(leases: [OfflineEntry.ID: UUID], for duration: Duration, now: Date) async throws -> Set<OfflineEntry.ID> {
        guard !leases.isEmpty else { return [] }
        let expiry = now.addingTimeInterval(duration.seconds)
        return try await write("extend leases") { db in
            try Set(leases.filter { try !Self.extend($0.key, lease: $0.value, until: expiry, in: db) }.keys)
        }
    }

    /// Extends the lease `lease` of entry `id` to `expiry` if it is still held; whether it was.
    private static func extend(_ id: OfflineEntry.ID, lease: UUID, until expiry: Date, in db: Database) throws -> Bool {
        try db.execute(
            sql: "UPDATE entry SET leaseExpiresAt = ? WHERE id = ? AND leaseToken = ?",
            arguments: [expiry.timeIntervalSince1970, id.uuidString, lease.uuidString]
        )
        return db.changesCount == 1
    }

    public func complete(_ id: OfflineEntry.ID, lease: UUID) async throws -> Bool {
        try await writeOutcome("remove a delivered entry") { [self] db in
            try count(delivered: true, id: id, lease: lease, in: db)
            try db.cachedStatement(sql: "DELETE FROM entry WHERE id = ? AND leaseToken = ?")
                .execute(arguments: [id.uuidString, lease.uuidString])
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
        try await writeOutcome("reschedule an entry") { [self] db in
            if countsAttempt { try count(delivered: false, id: id, lease: lease, in: db) }
            try db.cachedStatement(
                sql: """
                    UPDATE entry SET leaseToken = NULL, leaseExpiresAt = NULL,
                        notBefore = MAX(notBefore, ?), pausedUntil = ?, attempts = attempts + ?,
                        lastAttemptAt = ?, lastStatus = ?, lastError = ?
                    WHERE id = ? AND leaseToken = ?
                    """
            ).execute(
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
        return try await writeOutcome("set an entry aside") { [self] db in
            if countsAttempt { try count(delivered: false, id: id, lease: lease, in: db) }
            try db.cachedStatement(
                sql: """
                    UPDATE entry SET leaseToken = NULL, leaseExpiresAt = NULL, deadAt = ?, deadReason = ?,
                        attempts = attempts + ?,
                        lastAttemptAt = COALESCE(?, lastAttemptAt), lastStatus = COALESCE(?, lastStatus),
                        lastError = COALESCE(?, lastError)
                    WHERE id = ? AND leaseToken = ?
                    """
            ).execute(
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
            // Read as whatever SQLite holds: a damaged value is never converted by force.
            let earliest = try DatabaseValue.fetchOne(
                db,
                sql: "SELECT MIN(notBefore) FROM entry WHERE queue = ? AND deadAt IS NULL AND leaseToken IS NULL",
                arguments: [queue]
            )
            switch earliest?.storage {
            case .double(let seconds)?: return Date(timeIntervalSince1970: seconds)
            case .int64(let seconds)?: return Date(timeIntervalSince1970: Double(seconds))
            case .string?, .blob?: return Date()
            default: return nil
            }
        }
    }

    public func nextHeadDue(queue: String) async throws -> Date? {
        try await read("find when the head entry is due") { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT notBefore, leaseExpiresAt FROM entry WHERE queue = ? AND deadAt IS NULL ORDER BY sequence LIMIT 1",
                    arguments: [queue]
                )
            else { return nil }
            // Read as whatever SQLite holds: a damaged value makes the head due now (leasing it
            // sets it aside), never converted by force.
            func seconds(_ value: DatabaseValue) -> Double? {
                switch value.storage {
                case .double(let seconds): return seconds
                case .int64(let seconds): return Double(seconds)
                case .string, .blob: return Date().timeIntervalSince1970
                case .null: return nil
                }
            }
            let due = max(seconds(row[0]) ?? 0, seconds(row[1]) ?? 0)
            return Date(timeIntervalSince1970: due)
        }
    }

    public func count(queue: String) async throws -> Int {
        try await read("count entries") { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM entry WHERE queue = ? AND deadAt IS NULL", arguments: [queue])
                ?? 0
        }
    }

    public func oldestEntryDate(queue: String) async throws -> Date? {
        try await read("find the oldest entry") { db in
            try Double.fetchOne(
                db,
                sql: "SELECT MIN(createdAt) FROM entry WHERE queue = ? AND deadAt IS NULL",
                arguments: [queue]
            ).map { Date(timeIntervalSince1970: $0) }
        }
    }

    public func list(queue: String) async throws -> [OfflineEntry] {
        try await read("list entries") { db in
            Self.entries(
                try Row.fetchAll(db, sql: "SELECT * FROM entry WHERE queue = ? AND deadAt IS NULL ORDER BY sequence", arguments: [queue])
            )
        }
    }

    public func deadLetters(queue: String) async throws -> [OfflineEntry] {
        try await read("list dead letters") { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM entry WHERE queue = ? AND deadAt IS NOT NULL ORDER BY deadAt, sequence",
                arguments: [queue]
            ).compactMap { Self.lenientEntry($0) }
        }
    }

    public func retryDeadLetter(_ id: OfflineEntry.ID, now: Date) async throws {
        try await retryDeadLetter(id, replacing: nil, now: now)
    }

    public func retryDeadLetter(_ id: OfflineEntry.ID, replacingPayload expected: Data, with payload: Data, now: Date) async throws {
        try await retryDeadLetter(id, replacing: (expected, payload), now: now)
    }

    /// Re-inserts the dead letter at the end of its queue, its payload replaced when `replacing`
    /// says so and it still is `expected`.
    private func retryDeadLetter(_ id: OfflineEntry.ID, replacing: (expected: Data, payload: Data)?, now: Date) async throws {
        let queue = try await write("retry a dead letter") { db -> String in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT * FROM entry WHERE id = ? AND deadAt IS NOT NULL",
                    arguments: [id.uuidString]
                )
            else { throw OfflineStoreError(.notFound, message: "no dead letter \(id)") }
            guard let dead = Self.lenientEntry(row) else {
                throw OfflineStoreError(.corrupt, message: "the dead letter \(id) cannot be read")
            }
            if let replacing, dead.payload != replacing.expected {
                throw OfflineStoreError(.notFound, message: "the dead letter \(id) changed since it was read")
            }
            // Re-inserted at the end of its queue: a new sequence, attempts from zero.
            try db.execute(sql: "DELETE FROM entry WHERE id = ?", arguments: [id.uuidString])
            try db.execute(
                sql: """
                    INSERT INTO entry (id, queue, payload, idempotencyKey, dedupeKey, createdAt, notBefore,
                                       maxAttempts, expiresAt, lastAttemptAt, lastStatus, lastError)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)
                    """,
                arguments: [
                    dead.id.uuidString, dead.queue, replacing?.payload ?? dead.payload, dead.idempotencyKey, dead.dedupeKey,
                    dead.createdAt.timeIntervalSince1970, now.timeIntervalSince1970, dead.maxAttempts,
                    row["lastAttemptAt"] as? Double, row["lastStatus"] as? Int64, row["lastError"] as? String,
                ]
            )
            return dead.queue
        }
        // Due now: the queue's loop may be asleep until its next add.
        wake(queue: queue)
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
}
