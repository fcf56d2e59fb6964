import BrickOfflineCore
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

    /// At open: the rows that no query would ever reach or match — an id not in its canonical
    /// spelling (a lower-case UUID is respelled, anything else set aside), a queue, `notBefore` or
    /// `deadAt` of the wrong type (never due, never counted as dead) — are found by SQLite in one
    /// scan (``strandedRows``) and mended. Every other damage is found when the row is leased, which
    /// decodes it and sets it aside then. Returns how many were set aside.
    static func repairRows(in db: Database) throws -> Int {
        var damaged: [(sequence: Int64, reason: String)] = []
        for sequence in try Int64.fetchAll(db, sql: "SELECT sequence FROM entry WHERE \(strandedRows)") {
            guard var row = try Row.fetchOne(db, sql: "SELECT * FROM entry WHERE sequence = ?", arguments: [sequence]) else { continue }
            if let text = row["id"] as? String, let uuid = UUID(uuidString: text), uuid.uuidString != text,
                try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM entry WHERE id = ?)", arguments: [uuid.uuidString]) == false
            {
                try db.execute(sql: "UPDATE entry SET id = ? WHERE sequence = ?", arguments: [uuid.uuidString, sequence])
                row = try Row.fetchOne(db, sql: "SELECT * FROM entry WHERE sequence = ?", arguments: [sequence]) ?? row
            }
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

    /// The pending rows (and rows whose `deadAt` is not a date) that the store's queries could
    /// never lease, match by id, or count as dead. Only the columns those queries compare are
    /// checked (measured: about 0.4 µs per pending row); a row picked needlessly is only decoded
    /// once more. `coalesce`: a NULL anywhere makes the row a suspect, never a sound one.
    private static let strandedRows = """
        (deadAt IS NOT NULL AND typeof(deadAt) NOT IN ('real', 'integer'))
        OR (deadAt IS NULL
            AND NOT coalesce(typeof(id) = 'text' AND length(id) = 36 AND upper(id) = id
                             AND typeof(queue) = 'text' AND typeof(notBefore) IN ('real', 'integer'), 0))
        """
}
