import BrickRequest
import Foundation
import GRDB

/// Reading rows without trusting them: a database file is input, and a damaged or foreign row
/// (a wrongly typed column, a NULL where the schema says NOT NULL, an id that is not a UUID) must
/// never trap. Such a row is set aside as a dead letter with the reason; the rest of the queue goes
/// on.
extension SQLiteOfflineStore {
    /// The entry a row holds, or why it holds none. `lease` replaces the row's own (just leased).
    static func entry(_ row: Row, lease: OfflineEntry.Lease? = nil) throws(DamagedRow) -> OfflineEntry {
        let leaseToken = try StoredColumn(row, "leaseToken").optionalText()
        let leaseExpiry = try StoredColumn(row, "leaseExpiresAt").optionalNumber()
        let lastAttemptAt = try StoredColumn(row, "lastAttemptAt").optionalDate()
        let lastStatus = try StoredColumn(row, "lastStatus").optionalInteger()
        let lastError = try StoredColumn(row, "lastError").optionalText()
        let deadAt = try StoredColumn(row, "deadAt").optionalDate()
        let deadReason = try StoredColumn(row, "deadReason").optionalText()
        let attempts = try StoredColumn(row, "attempts").integer()
        let maxAttempts = try StoredColumn(row, "maxAttempts").optionalInteger()
        return OfflineEntry(
            id: try StoredColumn(row, "id").uuid(),
            queue: try StoredColumn(row, "queue").text(),
            sequence: try StoredColumn(row, "sequence").integer(),
            payload: try StoredColumn(row, "payload").bytes(),
            idempotencyKey: try StoredColumn(row, "idempotencyKey").text(),
            dedupeKey: try StoredColumn(row, "dedupeKey").optionalText(),
            createdAt: try StoredColumn(row, "createdAt").date(),
            notBefore: try StoredColumn(row, "notBefore").date(),
            attempts: Int(clamping: attempts),
            maxAttempts: maxAttempts.map { Int(clamping: $0) },
            expiresAt: try StoredColumn(row, "expiresAt").optionalDate(),
            lease: lease
                ?? leaseToken.flatMap { token in
                    UUID(uuidString: token).map {
                        OfflineEntry.Lease(token: $0, expiresAt: Date(timeIntervalSince1970: leaseExpiry ?? 0))
                    }
                },
            lastAttempt: lastAttemptAt.map {
                OfflineEntry.AttemptRecord(date: $0, status: lastStatus.map { Int(clamping: $0) }, error: lastError)
            },
            deadLetter: deadAt.map { OfflineEntry.DeadLetter(date: $0, reason: deadReason ?? "") }
        )
    }

    /// The rows of a read that hold valid entries; a damaged one is left out (the next lease sets
    /// it aside).
    static func entries(_ rows: [Row]) -> [OfflineEntry] {
        rows.compactMap { try? entry($0) }
    }

    /// Sets a damaged row aside as a dead letter, by its sequence (the one column SQLite keeps an
    /// integer), making it readable as one: a fresh id when its own is unusable, dates and counts
    /// where they are missing. Its payload is kept as it was, for whoever looks into it.
    static func setAside(_ row: Row, reason: String, in db: Database) throws {
        guard let sequence = row["sequence"] as? Int64 else { return }
        let now = Date().timeIntervalSince1970
        let idIsUsable = (try? StoredColumn(row, "id").uuid()) != nil
        try db.execute(
            sql: """
                UPDATE entry SET
                    id = CASE WHEN ? THEN id ELSE ? END,
                    queue = CASE WHEN typeof(queue) = 'text' THEN queue ELSE CAST(queue AS TEXT) END,
                    idempotencyKey = CASE WHEN typeof(idempotencyKey) = 'text' THEN idempotencyKey ELSE '' END,
                    createdAt = CASE WHEN typeof(createdAt) IN ('real', 'integer') THEN createdAt ELSE ? END,
                    notBefore = CASE WHEN typeof(notBefore) IN ('real', 'integer') THEN notBefore ELSE ? END,
                    attempts = CASE WHEN typeof(attempts) = 'integer' THEN attempts ELSE 0 END,
                    leaseToken = NULL, leaseExpiresAt = NULL,
                    deadAt = ?, deadReason = ?
                WHERE sequence = ?
                """,
            arguments: [idIsUsable, UUID().uuidString, now, now, now, reason, sequence]
        )
    }

    /// An entry read leniently, for listing dead letters: what cannot be read is shown empty.
    static func lenientEntry(_ row: Row) -> OfflineEntry? {
        if let entry = try? entry(row) { return entry }
        guard let sequence = row["sequence"] as? Int64, let id = (row["id"] as? String).flatMap(UUID.init(uuidString:)) else {
            return nil
        }
        func date(_ name: String) -> Date? {
            (try? StoredColumn(row, name).optionalNumber()).flatMap { $0 }.map { Date(timeIntervalSince1970: $0) }
        }
        let reason = (row["deadReason"] as? String) ?? "damaged row"
        return OfflineEntry(
            id: id,
            queue: (row["queue"] as? String) ?? "",
            sequence: sequence,
            payload: (row["payload"] as? Data) ?? Data(),
            idempotencyKey: (row["idempotencyKey"] as? String) ?? "",
            dedupeKey: row["dedupeKey"] as? String,
            createdAt: date("createdAt") ?? Date(timeIntervalSince1970: 0),
            notBefore: date("notBefore") ?? Date(timeIntervalSince1970: 0),
            attempts: Int(clamping: (row["attempts"] as? Int64) ?? 0),
            maxAttempts: (row["maxAttempts"] as? Int64).map { Int(clamping: $0) },
            expiresAt: date("expiresAt"),
            lease: nil,
            lastAttempt: nil,
            deadLetter: OfflineEntry.DeadLetter(date: date("deadAt") ?? Date(timeIntervalSince1970: 0), reason: reason)
        )
    }

    /// At open: every pending row is checked once; one whose id is a UUID in another spelling
    /// (lower case) gets its canonical spelling, and one that does not hold a valid entry is set
    /// aside with the reason. Returns how many were set aside. The rows are read through a cursor,
    /// one at a time (a queue may hold many large payloads), and mended after the read: the table
    /// must not change under an open cursor. (Opening already reads the whole file once, for
    /// `quick_check`.)
    static func repairRows(in db: Database) throws -> Int {
        var respelled: [(sequence: Int64, id: String)] = []
        var damaged: [(sequence: Int64, reason: String)] = []
        let rows = try Row.fetchCursor(
            db,
            sql: "SELECT * FROM entry WHERE deadAt IS NULL OR typeof(deadAt) NOT IN ('real', 'integer')"
        )
        while let row = try rows.next() {
            guard let sequence = row["sequence"] as? Int64 else { continue }
            do {
                _ = try entry(row)
            } catch {
                if let text = row["id"] as? String, let uuid = UUID(uuidString: text), uuid.uuidString != text {
                    respelled.append((sequence, uuid.uuidString))
                } else {
                    damaged.append((sequence, error.reason))
                }
            }
        }
        for (sequence, id) in respelled {
            let taken = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM entry WHERE id = ?)", arguments: [id]) ?? true
            if !taken { try db.execute(sql: "UPDATE entry SET id = ? WHERE sequence = ?", arguments: [id, sequence]) }
            // Another column may be damaged too, or the canonical id already taken.
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM entry WHERE sequence = ?", arguments: [sequence]) else { continue }
            do {
                _ = try entry(row)
            } catch {
                damaged.append((sequence, error.reason))
            }
        }
        for (sequence, reason) in damaged {
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM entry WHERE sequence = ?", arguments: [sequence]) else { continue }
            try setAside(row, reason: reason, in: db)
        }
        return damaged.count
    }
}
