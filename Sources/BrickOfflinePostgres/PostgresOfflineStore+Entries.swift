// Over 450 lines: every entry requirement of OfflineStore on PostgreSQL, one statement each, read side by side with the SQLite store's.
import BrickOfflineCore
import BrickRequest
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// What ``OfflineStore`` asks, in SQL: each method one statement (or one transaction), fenced by
/// the lease's token where it writes under a lease, with one `NOTIFY` per transaction and queue
/// where it makes work.
extension PostgresOfflineStore {
    // MARK: - Adding

    public func add(_ drafts: [OfflineEntry.Draft], dedupe: DedupePolicy) async throws -> [OfflineEntry.ID] {
        guard !drafts.isEmpty else { return [] }
        for queue in Set(drafts.map(\.queue)) { try OfflineEntry.checkQueueName(queue) }
        let ids: [OfflineEntry.ID]
        if drafts.count <= Self.rowsPerInsert && drafts.allSatisfy({ $0.dedupeKey == nil }) {
            // One statement, committed on its own: no BEGIN and COMMIT round trips.
            ids = try await run("add entries") { [self] in
                try await client.executeToEnd(insertStatement(drafts[...], notifying: false, sender: workerName), logger: logger)
                return drafts.map(\.id)
            }
        } else {
            ids = try await transaction("add entries") { [self] connection in
                try await self.insert(drafts, dedupe: dedupe, on: connection, notifying: false, sender: workerName)
            }
        }
        // Announced after the commit, coalesced (see Notifier): PostgreSQL makes notifying commits
        // take turns, and a notification per add would cost every listener a wake-up per add.
        for queue in Set(drafts.map(\.queue)) { madeWork(in: queue) }
        return ids
    }

    /// The most rows one `INSERT` takes (9 parameters each, of PostgreSQL's 65,535).
    static let rowsPerInsert = 4000

    /// A multi-row `INSERT` of `drafts`; with `notifying` (and a store that notifies), the same
    /// statement sends each queue's notification, delivered when its transaction commits, naming
    /// `sender` (a store's listener ignores its own worker name's).
    func insertStatement(_ drafts: ArraySlice<OfflineEntry.Draft>, notifying: Bool, sender: String) throws -> PostgresQuery {
        var sql = """
            INSERT INTO \(schema).entry (id, queue, payload, idempotency_key, dedupe_key, created_at,
                                         not_before, max_attempts, expires_at) VALUES
            """
        var binds = PostgresBindings(capacity: drafts.count * 9)
        for (index, draft) in drafts.enumerated() {
            let base = index * 9
            sql += index == 0 ? " " : ", "
            sql += "(" + (1...9).map { "$\(base + $0)" }.joined(separator: ", ") + ")"
            binds.append(draft.id)
            binds.append(draft.queue)
            try binds.append(draft.payload)
            binds.append(draft.idempotencyKey)
            binds.append(draft.dedupeKey)
            binds.append(draft.createdAt)
            binds.append(draft.notBefore)
            binds.append(draft.maxAttempts.map(Int64.init))
            binds.append(draft.expiresAt)
        }
        if notifying && sendsNotifications {
            // `channel` is the validated schema name and a suffix: safe as a literal.
            binds.append(sender)
            sql = """
                WITH added AS (\(sql) RETURNING queue)
                SELECT pg_notify('\(channel)', $\(drafts.count * 9 + 1) || E'\\n' || queue) FROM (SELECT DISTINCT queue FROM added) q
                """
        }
        return PostgresQuery(unsafeSQL: sql, binds: binds)
    }

    /// Inserts `drafts` on `connection`, inside the caller's transaction (the outbox) or the store's
    /// own; with `notifying`, sends each queue's notification inside the transaction (delivered
    /// when it commits: the outbox, whose commit the store does not see), naming `sender`.
    func insert(
        _ drafts: [OfflineEntry.Draft],
        dedupe: DedupePolicy,
        on connection: PostgresConnection,
        notifying: Bool,
        sender: String
    ) async throws -> [OfflineEntry.ID] {
        for queue in Set(drafts.map(\.queue)) { try OfflineEntry.checkQueueName(queue) }
        for draft in drafts {
            guard let key = draft.dedupeKey else { continue }
            var existing: (Int64, UUID?)?
            for try await row in try await connection.query(
                """
                SELECT sequence, lease_token FROM \(unescaped: schema).entry
                WHERE queue = \(draft.queue) AND dedupe_key = \(key) AND dead_at IS NULL FOR UPDATE
                """,
                logger: logger
            ).decode((Int64, UUID?).self) {
                existing = row
            }
            guard let (sequence, token) = existing else { continue }
            if dedupe == .reject || token != nil {
                throw OfflineStoreError(
                    .duplicate,
                    message: token != nil
                        ? "an entry with dedupe key \(key.debugDescription) is being attempted"
                        : "an entry with dedupe key \(key.debugDescription) is pending"
                )
            }
            try await connection.executeToEnd("DELETE FROM \(unescaped: schema).entry WHERE sequence = \(sequence)", logger: logger)
        }
        // Multi-row inserts; the notifications, if any, with the last one.
        for start in stride(from: 0, to: drafts.count, by: Self.rowsPerInsert) {
            let end = min(start + Self.rowsPerInsert, drafts.count)
            try await connection.executeToEnd(insertStatement(drafts[start..<end], notifying: notifying && end == drafts.count, sender: sender), logger: logger)
        }
        return drafts.map(\.id)
    }

    // MARK: - Leasing

    public func lease(queue: String, limit: Int, cap: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        guard limit > 0, cap > 0 else { return [] }
        let token = UUID()
        let leased = try await run("lease entries") { [self] in
            try await entries(
                client.query(
                    """
                    SELECT * FROM \(unescaped: schema).claim(\(queue), \(Int64(limit)), \(Int64(cap)), \(now),
                                                             \(token), \(workerName), \(duration.seconds))
                    """,
                    logger: logger
                )
            ).sorted { $0.sequence < $1.sequence }
        }
        if cap < Int.max { await capWatch.check(queue: queue, cap: cap, store: self) }
        return leased
    }

    /// The caps the live leases of `queue` were claimed with (for the fleet's cap check).
    func liveLeaseCaps(queue: String) async throws -> Set<Int> {
        try await run("read the caps of live leases") { [self] in
            var caps: Set<Int> = []
            for try await cap in try await client.query(
                """
                SELECT DISTINCT lease_cap FROM \(unescaped: schema).entry
                WHERE queue = \(queue) AND dead_at IS NULL AND lease_token IS NOT NULL AND lease_cap IS NOT NULL
                  AND \(unescaped: schema).lease_is_live(lease_expires_at, \(leaseDuration.seconds))
                """,
                logger: logger
            ).decode(Int64.self) {
                caps.insert(Int(cap))
            }
            return caps
        }
    }

    public func leaseHead(queue: String, now: Date, for duration: Duration) async throws -> OfflineEntry? {
        let token = UUID()
        let head = try await run("lease the head entry") { [self] in
            // The oldest pending entry, if it is due and free and nothing else of the queue is
            // leased; a concurrent claim of the same row waits, then finds it leased and takes nothing.
            try await entries(
                client.query(
                    """
                    SELECT * FROM \(unescaped: schema).claim_head(\(queue), \(now), \(token), \(workerName), \(duration.seconds))
                    """,
                    logger: logger
                )
            ).first
        }
        await capWatch.check(queue: queue, cap: 1, store: self)
        return head
    }

    public func extend(_ id: OfflineEntry.ID, lease: UUID, until expiry: Date) async throws -> Bool {
        // The length asked for, measured from the database's clock.
        try await extend(id, lease: lease, seconds: max(0, expiry.timeIntervalSinceNow))
    }

    /// Extends the lease `duration` past the database's clock: `now` (the caller's clock) is not
    /// read, so a step of this machine's wall clock changes nothing.
    public func extend(_ id: OfflineEntry.ID, lease: UUID, for duration: Duration, now: Date) async throws -> Bool {
        try await extend(id, lease: lease, seconds: max(0, duration.seconds))
    }

    /// Every lease still held extended `duration` past the database's clock, in one statement.
    public func extend(leases: [OfflineEntry.ID: UUID], for duration: Duration, now: Date) async throws -> Set<OfflineEntry.ID> {
        guard !leases.isEmpty else { return [] }
        let (ids, tokens) = (Array(leases.keys), Array(leases.values))
        let seconds = max(0, duration.seconds)
        let kept = try await run("extend leases") { [self] in
            var kept: Set<OfflineEntry.ID> = []
            let rows = try await client.query(
                """
                UPDATE \(unescaped: schema).entry e
                SET lease_expires_at = clock_timestamp() + make_interval(secs => \(seconds))
                FROM unnest(\(ids)::uuid[], \(tokens)::uuid[]) AS l(id, token)
                WHERE e.id = l.id AND e.lease_token = l.token RETURNING e.id
                """,
                logger: logger
            )
            for try await id in rows.decode(UUID.self) { kept.insert(id) }
            return kept
        }
        return Set(ids).subtracting(kept)
    }

    private func extend(_ id: OfflineEntry.ID, lease: UUID, seconds: Double) async throws -> Bool {
        try await run("extend a lease") { [self] in
            try await changed(
                client.query(
                    """
                    UPDATE \(unescaped: schema).entry
                    SET lease_expires_at = clock_timestamp() + make_interval(secs => \(seconds))
                    WHERE id = \(id) AND lease_token = \(lease) RETURNING 1
                    """,
                    logger: logger
                )
            )
        }
    }

    // MARK: - Fenced outcomes

    public func complete(_ id: OfflineEntry.ID, lease: UUID) async throws -> Bool {
        try await write(Outcome(id: id, lease: lease, kind: .complete))
    }

    public func reschedule(
        _ id: OfflineEntry.ID,
        lease: UUID,
        notBefore: Date,
        attempt: OfflineEntry.AttemptRecord,
        countsAttempt: Bool
    ) async throws -> Bool {
        try await write(
            Outcome(id: id, lease: lease, kind: .reschedule, notBefore: notBefore, countsAttempt: countsAttempt, attempt: attempt)
        )
    }

    public func bury(
        _ id: OfflineEntry.ID,
        lease: UUID,
        reason: String,
        attempt: OfflineEntry.AttemptRecord?,
        countsAttempt: Bool
    ) async throws -> Bool {
        try await write(Outcome(id: id, lease: lease, kind: .bury, countsAttempt: countsAttempt, attempt: attempt, reason: reason))
    }

    // MARK: - Pending entries

    public func replacePending(
        queue: String,
        ids: [OfflineEntry.ID],
        with drafts: [OfflineEntry.Draft]
    ) async throws -> Bool {
        for queue in Set(drafts.map(\.queue)) { try OfflineEntry.checkQueueName(queue) }
        let replaced = try await transaction("replace pending entries") { [self] connection in
            var sequences: [Int64] = []
            for id in ids {
                var found: Int64?
                for try await sequence in try await connection.query(
                    """
                    SELECT sequence FROM \(unescaped: schema).entry
                    WHERE id = \(id) AND queue = \(queue) AND dead_at IS NULL AND lease_token IS NULL FOR UPDATE
                    """,
                    logger: logger
                ).decode(Int64.self) {
                    found = sequence
                }
                guard let found else { return false }
                sequences.append(found)
            }
            guard let first = sequences.min() else { return true }
            try await connection.executeToEnd("DELETE FROM \(unescaped: schema).entry WHERE sequence = ANY(\(sequences))", logger: logger)
            // The replacements take the first one's place: the entries after it move up (two
            // steps, so that no sequence is ever held twice), then the new ones fill the gap.
            let shift = Int64(drafts.count)
            if shift > 0 {
                try await connection.executeToEnd(
                    """
                    UPDATE \(unescaped: schema).entry SET sequence = -sequence - \(shift)
                    WHERE queue = \(queue) AND sequence > \(first)
                    """,
                    logger: logger
                )
                try await connection.executeToEnd(
                    "UPDATE \(unescaped: schema).entry SET sequence = -sequence WHERE queue = \(queue) AND sequence < 0",
                    logger: logger
                )
            }
            for (offset, draft) in drafts.enumerated() {
                try await connection.executeToEnd(
                    """
                    INSERT INTO \(unescaped: schema).entry (sequence, id, queue, payload, idempotency_key, dedupe_key,
                        created_at, not_before, max_attempts, expires_at)
                    VALUES (\(first + Int64(offset)), \(draft.id), \(draft.queue), \(draft.payload),
                            \(draft.idempotencyKey), \(draft.dedupeKey), \(draft.createdAt), \(draft.notBefore),
                            \(draft.maxAttempts.map(Int64.init)), \(draft.expiresAt))
                    """,
                    logger: logger
                )
            }
            return true
        }
        if replaced { madeWork(in: queue) }
        return replaced
    }

    public func setAside(_ ids: [OfflineEntry.ID], reason: String, now: Date) async throws {
        guard !ids.isEmpty else { return }
        try await run("set entries aside") { [self] in
            try await client.executeToEnd(
                """
                UPDATE \(unescaped: schema).entry SET dead_at = \(now), dead_reason = \(reason)
                WHERE id = ANY(\(ids)) AND dead_at IS NULL AND lease_token IS NULL
                """,
                logger: logger
            )
        }
    }

    public func clearPauses(queue: String, now: Date) async throws {
        try await run("clear pauses") { [self] in
            // Only pauses: a scheduled entry's own `not_before` is later than its pause, or it has none.
            try await changed(client.query(
                """
                WITH done AS (
                    UPDATE \(unescaped: schema).entry SET not_before = \(now), paused_until = NULL
                    WHERE queue = \(queue) AND dead_at IS NULL AND paused_until IS NOT NULL
                      AND not_before > \(now) AND not_before <= paused_until
                    RETURNING queue)
                SELECT DISTINCT queue FROM done
                """,
                logger: logger
            ))
        }
    }

    /// The earliest date an entry of `queue` may be claimed: an unleased entry's `notBefore`, or
    /// a leased one's lease expiry (its worker may die).
    public func nextDue(queue: String) async throws -> Date? {
        try await run("find the next due entry") { [self] in
            var next: Date?
            for try await date in try await client.query(
                """
                SELECT min(CASE WHEN lease_token IS NULL
                                     OR NOT \(unescaped: schema).lease_is_live(lease_expires_at, \(leaseDuration.seconds))
                                THEN not_before
                                ELSE greatest(not_before, lease_expires_at) END)
                FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NULL
                """,
                logger: logger
            ).decode(Date?.self) {
                next = date
            }
            return next
        }
    }

    public func nextHeadDue(queue: String) async throws -> Date? {
        try await run("find when the head entry is due") { [self] in
            var next: Date?
            // As `claim_head` leases: the head, once due, and once no live lease holds it or any
            // other entry of the queue (greatest() passes over NULLs).
            for try await date in try await client.query(
                """
                SELECT greatest(h.not_before,
                                (SELECT max(o.lease_expires_at) FROM \(unescaped: schema).entry o
                                 WHERE o.queue = \(queue) AND o.dead_at IS NULL AND o.lease_token IS NOT NULL
                                   AND \(unescaped: schema).lease_is_live(o.lease_expires_at, \(leaseDuration.seconds))))
                FROM (SELECT not_before FROM \(unescaped: schema).entry
                      WHERE queue = \(queue) AND dead_at IS NULL ORDER BY sequence LIMIT 1) h
                """,
                logger: logger
            ).decode(Date?.self) {
                next = date
            }
            return next
        }
    }

    public func oldestEntryDate(queue: String) async throws -> Date? {
        try await run("find the oldest entry") { [self] in
            var oldest: Date? = nil
            for try await value in try await client.query(
                "SELECT min(created_at) FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NULL",
                logger: logger
            ).decode(Date?.self) {
                oldest = value
            }
            return oldest
        }
    }

    public func count(queue: String) async throws -> Int {
        try await run("count entries") { [self] in
            var count = 0
            for try await value in try await client.query(
                "SELECT count(*) FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NULL",
                logger: logger
            ).decode(Int.self) {
                count = value
            }
            return count
        }
    }

    public func list(queue: String) async throws -> [OfflineEntry] {
        try await run("list entries") { [self] in
            try await entries(
                client.query(
                    "SELECT * FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NULL ORDER BY sequence",
                    logger: logger
                )
            )
        }
    }

    public func deadLetters(queue: String) async throws -> [OfflineEntry] {
        try await run("list dead letters") { [self] in
            try await entries(
                client.query(
                    """
                    SELECT * FROM \(unescaped: schema).entry WHERE queue = \(queue) AND dead_at IS NOT NULL
                    ORDER BY dead_at, sequence
                    """,
                    logger: logger
                )
            )
        }
    }

    public func retryDeadLetter(_ id: OfflineEntry.ID, now: Date) async throws {
        try await retryDeadLetter(id, replacing: nil, now: now)
    }

    public func retryDeadLetter(_ id: OfflineEntry.ID, replacingPayload expected: Data, with payload: Data, now: Date) async throws {
        try await retryDeadLetter(id, replacing: (expected, payload), now: now)
    }

    /// Back at the end of its queue: a new sequence, attempts from zero, no expiry; its payload
    /// replaced when `replacing` says so, and only while it is still `expected` (compare and set).
    private func retryDeadLetter(_ id: OfflineEntry.ID, replacing: (expected: Data, payload: Data)?, now: Date) async throws {
        let (expected, payload) = (replacing?.expected, replacing?.payload)
        let moved = try await run("retry a dead letter") { [self] in
            try await changed(
                client.query(
                    """
                    WITH moved AS (
                        UPDATE \(unescaped: schema).entry SET sequence = DEFAULT, dead_at = NULL, dead_reason = NULL,
                            attempts = 0, not_before = \(now), paused_until = NULL, expires_at = NULL,
                            payload = coalesce(\(payload)::bytea, payload)
                        WHERE id = \(id) AND dead_at IS NOT NULL AND (\(expected)::bytea IS NULL OR payload = \(expected)::bytea)
                        RETURNING queue)
                    SELECT queue FROM moved
                    """,
                    logger: logger
                )
            )
        }
        if !moved {
            throw OfflineStoreError(.notFound, message: "no dead letter \(id)\(replacing == nil ? "" : " (or it changed since it was read)")")
        }
    }

    public func remove(_ id: OfflineEntry.ID) async throws {
        try await run("remove an entry") { [self] in
            try await changed(
                client.query(
                    """
                    WITH done AS (DELETE FROM \(unescaped: schema).entry WHERE id = \(id) RETURNING queue)
                    SELECT queue FROM done
                    """,
                    logger: logger
                )
            )
        }
    }

    public func removeAll(queue: String) async throws {
        try await run("remove all entries") { [self] in
            try await client.executeToEnd("DELETE FROM \(unescaped: schema).entry WHERE queue = \(queue)", logger: logger)
        }
    }

    // MARK: - Plumbing

    /// Runs `body` in a transaction on one connection of the pool.
    func transaction<T: Sendable>(
        _ what: String,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            return try await CallDeadline.run(what) { [client, logger] in
                try await client.withConnection { connection in
                    try await connection.withTransaction(logger: logger) { connection in try await body(connection) }
                }
            }
        } catch let error as PostgresTransactionError {
            let underlying = error.closureError ?? error.beginError ?? error.commitError ?? error.rollbackError
            if let refusal = underlying as? OfflineStoreError { throw refusal }
            throw Self.storeError(underlying ?? error, doing: what)
        } catch let error as OfflineStoreError {
            throw error
        } catch {
            throw Self.storeError(error, doing: what)
        }
    }

    /// Whether a statement changed a row (it returns a row for each it changed). A statement that
    /// returns the changed rows' `queue` (and makes work there: a finished, rescheduled or freed
    /// entry) wakes that queue's workers.
    @discardableResult
    func changed(_ rows: PostgresRowSequence) async throws -> Bool {
        var queues: Set<String> = []
        var any = false
        for try await row in rows {
            any = true
            let columns = row.makeRandomAccess()
            if columns.contains("queue"), let queue = try? columns["queue"].decode(String.self) { queues.insert(queue) }
        }
        queues.forEach { madeWork(in: $0) }
        return any
    }

    /// Reads whole `entry` rows. A row that does not read as an entry (a NULL where the schema
    /// was altered by hand to allow one) is set aside as a dead letter with the reason, as the
    /// SQLite store does at open, instead of failing every claim and list of its queue.
    func entries(_ rows: PostgresRowSequence) async throws -> [OfflineEntry] {
        var entries: [OfflineEntry] = []
        var unreadable: [(sequence: Int64, reason: String)] = []
        for try await row in rows {
            let columns = row.makeRandomAccess()
            do {
                entries.append(try Self.entry(columns))
            } catch {
                guard let sequence = try? columns["sequence"].decode(Int64.self) else { throw error }
                let column = (error as? PostgresDecodingError)?.columnName ?? "a column"
                unreadable.append((sequence, "unreadable row: \(column) does not hold a valid value"))
            }
        }
        for (sequence, reason) in unreadable {
            logger.warning(
                "offline store set an unreadable entry row aside",
                metadata: ["db.namespace": "\(schema)", "brick.entry.sequence": "\(sequence)", "brick.reason": "\(reason)"]
            )
            try await client.executeToEnd(
                """
                UPDATE \(unescaped: schema).entry SET dead_at = coalesce(dead_at, clock_timestamp()), dead_reason = \(reason),
                    lease_token = NULL, lease_owner = NULL, lease_expires_at = NULL
                WHERE sequence = \(sequence)
                """,
                logger: logger
            )
        }
        return entries
    }

    /// One `entry` row as an entry.
    private static func entry(_ columns: PostgresRandomAccessRow) throws -> OfflineEntry {
        func value<T: PostgresDecodable>(_ name: String, _ type: T.Type = T.self) throws -> T {
            try columns[name].decode(T.self)
        }
        let leaseToken: UUID? = try value("lease_token")
        let leaseExpiry: Date? = try value("lease_expires_at")
        let lastAttemptAt: Date? = try value("last_attempt_at")
        let deadAt: Date? = try value("dead_at")
        return OfflineEntry(
            id: try value("id"),
            queue: try value("queue"),
            sequence: try value("sequence"),
            payload: try value("payload"),
            idempotencyKey: try value("idempotency_key"),
            dedupeKey: try value("dedupe_key"),
            createdAt: try value("created_at"),
            notBefore: try value("not_before"),
            attempts: Int(try value("attempts", Int64.self)),
            maxAttempts: try value("max_attempts", Int64?.self).map(Int.init),
            expiresAt: try value("expires_at"),
            lease: try leaseToken.map { OfflineEntry.Lease(token: $0, expiresAt: leaseExpiry ?? Date(), owner: try value("lease_owner")) },
            lastAttempt: try lastAttemptAt.map {
                OfflineEntry.AttemptRecord(
                    date: $0,
                    status: try value("last_status", Int64?.self).map(Int.init),
                    error: try value("last_error")
                )
            },
            deadLetter: try deadAt.map { OfflineEntry.DeadLetter(date: $0, reason: try value("dead_reason", String?.self) ?? "") }
        )
    }
}
