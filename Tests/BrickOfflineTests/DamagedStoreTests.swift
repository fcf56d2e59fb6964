import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import Foundation
import GRDB
import Testing

/// The offline store's file damaged column by column, as a bad disk or a foreign tool would leave
/// it: a wrongly typed value, a NULL (in a copy of the table without its NOT NULL constraints, as an
/// older or foreign build could have made it) and text that is not UTF-8. Opening and using the
/// store never traps; a row that no longer holds an entry becomes a dead letter with its reason,
/// and the rest of the queue is delivered.
@Suite("The offline store against damaged rows", .timeLimit(.minutes(2)))
struct DamagedStoreTests {
    /// Every column but `sequence` (an INTEGER PRIMARY KEY: SQLite itself refuses any other value).
    static let columns: [(name: String, kind: String)] = [
        ("id", "text"), ("queue", "text"), ("payload", "blob"), ("idempotencyKey", "text"), ("dedupeKey", "text"),
        ("createdAt", "real"), ("notBefore", "real"), ("pausedUntil", "real"), ("attempts", "integer"),
        ("maxAttempts", "integer"), ("expiresAt", "real"), ("leaseToken", "text"), ("leaseExpiresAt", "real"),
        ("lastAttemptAt", "real"), ("lastStatus", "integer"), ("lastError", "text"), ("deadAt", "real"),
        ("deadReason", "text"),
    ]

    static let cases: [(String, String, Damage)] = columns.flatMap { column in
        Damage.allCases.map { (column.name, column.kind, $0) }
    }

    /// The table again without its NOT NULL constraints, its rows copied over.
    static let loosen = """
        ALTER TABLE entry RENAME TO entry_old;
        CREATE TABLE entry (
            sequence INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, queue TEXT, payload BLOB,
            idempotencyKey TEXT, dedupeKey TEXT, createdAt REAL, notBefore REAL, pausedUntil REAL,
            attempts INTEGER DEFAULT 0, maxAttempts INTEGER, expiresAt REAL, leaseToken TEXT,
            leaseExpiresAt REAL, lastAttemptAt REAL, lastStatus INTEGER, lastError TEXT, deadAt REAL,
            deadReason TEXT
        );
        INSERT INTO entry SELECT * FROM entry_old;
        DROP TABLE entry_old;
        """

    /// Two entries in queue `q`, the first one damaged on disk, the store opened again.
    private func damagedStore(
        in directory: URL,
        column: String,
        sql value: String
    ) async throws -> (store: SQLiteOfflineStore, first: OfflineEntry.ID, second: OfflineEntry.ID) {
        let ids: [OfflineEntry.ID]
        do {
            let store = try SQLiteOfflineStore(name: "damaged", directory: directory)
            let now = Date()
            ids = try await store.add(
                [
                    OfflineEntry.Draft(queue: "q", payload: Data("one".utf8), dedupeKey: "k1", createdAt: now),
                    OfflineEntry.Draft(queue: "q", payload: Data("two".utf8), createdAt: now),
                ],
                dedupe: .reject
            )
        }
        let database = try DatabaseQueue(path: directory.appendingPathComponent("damaged.sqlite").path)
        try await database.write { db in
            if value == "NULL" { try db.execute(sql: Self.loosen) }
            try db.execute(sql: "UPDATE entry SET \(column) = \(value) WHERE sequence = 1")
        }
        try database.close()
        return (try SQLiteOfflineStore(name: "damaged", directory: directory), ids[0], ids[1])
    }

    @Test("a damaged column never traps: the row is delivered if it still holds an entry, set aside with its reason if not", arguments: cases)
    func damagedColumn(column: String, kind: String, damage: Damage) async throws {
        try await withDirectory { directory in
            let (store, first, second) = try await damagedStore(
                in: directory,
                column: column,
                sql: damage.sql(forColumnOf: kind)
            )
            // Everything a queue asks of its store, none of which may trap.
            _ = try await store.count(queue: "q")
            _ = try await store.list(queue: "q")
            _ = try await store.nextDue(queue: "q")
            var delivered: [OfflineEntry.ID] = []
            while true {
                let leased = try await store.lease(queue: "q", limit: 10, now: Date().addingTimeInterval(3600), for: .seconds(60))
                if leased.isEmpty { break }
                for entry in leased {
                    #expect(try await store.complete(entry.id, lease: entry.lease!.token))
                    delivered.append(entry.id)
                }
            }
            #expect(delivered.contains(second), "the undamaged entry is delivered")
            #expect(try await store.count(queue: "q") == 0, "nothing is left pending that can never be delivered")
            let dead = try await store.deadLetters(queue: "q")
            if !delivered.contains(first) && column != "queue" {
                #expect(dead.count == 1, "\(column) \(damage): set aside")
                // Counted: at open (a row no query could reach) or when leased (any other damage).
                #expect(store.damagedRowsSetAside == 1, "\(column) \(damage): counted as set aside")
                #expect(dead.first?.deadLetter?.reason.contains("damaged row") == true, "\(dead)")
                // A dead letter can be removed by the id it is listed with.
                if let id = dead.first?.id {
                    try await store.remove(id)
                    #expect(try await store.deadLetters(queue: "q").isEmpty)
                }
            }
            #expect(try await store.integrityCheck() == "ok")
        }
    }

    @Test("an entry whose id is a lower-case UUID is delivered once and removed (not sent again and again)")
    func lowerCaseID() async throws {
        try await withDirectory { directory in
            let (store, first, _) = try await damagedStore(in: directory, column: "id", sql: "lower(id)")
            let leased = try await store.lease(queue: "q", limit: 10, now: Date(), for: .seconds(3600))
            #expect(leased.count == 2)
            for entry in leased { #expect(try await store.complete(entry.id, lease: entry.lease!.token)) }
            #expect(leased.map(\.id).contains(first))
            #expect(try await store.count(queue: "q") == 0)
            #expect(store.damagedRowsSetAside == 0)
        }
    }

    @Test("an id that is not a UUID at all: set aside with its reason, and removable by the id it is listed with")
    func notAUUID() async throws {
        try await withDirectory { directory in
            let (store, _, second) = try await damagedStore(in: directory, column: "id", sql: "'not-a-uuid'")
            #expect(store.damagedRowsSetAside == 1)
            let leased = try await store.lease(queue: "q", limit: 10, now: Date(), for: .seconds(3600))
            #expect(leased.map(\.id) == [second])
            let dead = try await store.deadLetters(queue: "q")
            #expect(dead.count == 1)
            #expect(dead.first?.deadLetter?.reason.contains("not-a-uuid") == true, "\(dead)")
        }
    }
}
