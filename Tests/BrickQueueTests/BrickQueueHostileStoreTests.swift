import BrickOffline
import BrickOfflineTestSupport
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import GRDB
import Testing

/// `brick-queue` (the built binary) and a worker on SQLite files that are damaged, hostile, or in
/// use: a tool that inspects never changes what it inspects, and no number read back traps.
@Suite("brick-queue on damaged, hostile and busy SQLite stores", .serialized, .timeLimit(.minutes(3)))
struct BrickQueueHostileStoreTests {
    static func run(_ arguments: [String]) async throws -> BrickQueueCommandTests.Run {
        try await BrickQueueCommandTests.brickQueue(arguments)
    }

    /// The bytes of the store's files, to compare before and after.
    static func snapshot(_ directory: URL) throws -> [String: Data] {
        var files: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            files[name] = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path)
        }
        return files
    }

    /// Overwrites the root page of index `entry_fifo` with garbage: `quick_check` fails, the
    /// table's rows stay readable.
    static func damageIndex(_ path: String) throws {
        let (root, pageSize): (Int, Int) = try {
            let queue = try DatabaseQueue(path: path)
            defer { try? queue.close() }
            return try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
                let root = try Int.fetchOne(db, sql: "SELECT rootpage FROM sqlite_schema WHERE name = 'entry_fifo'") ?? 0
                return (root, try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096)
            }
        }()
        try #require(root > 1)
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seek(toOffset: UInt64((root - 1) * pageSize))
        try handle.write(contentsOf: Data((0..<pageSize).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }))
        try handle.close()
    }

    @Test("a damaged store: every read command exits 1 saying so and leaves every file byte-identical; a worker then carries every readable entry into the new store")
    func damagedStore() async throws {
        try await withDirectory { directory in
            var ids: [UUID] = []
            let path: String
            do {
                let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
                for number in 0..<200 {
                    let draft = OfflineEntry.Draft(queue: "hooks", payload: Data("entry \(number)".utf8), createdAt: Date(), notBefore: Date().addingTimeInterval(3600))
                    ids.append(draft.id)
                    _ = try await store.add([draft], dedupe: .reject)
                }
                try await store.setPaused(true, queue: "hooks")
                path = store.path
            }
            try Self.damageIndex(path)
            let before = try Self.snapshot(directory)
            for arguments in [["status"], ["list", "hooks"], ["status", "--dead-reasons"], ["pause", "hooks"], ["show", ids[0].uuidString]] {
                let result = try await Self.run(["--sqlite", path] + arguments)
                #expect(result.status == 1, "\(arguments): \(result.output)")
                #expect(result.output.contains("damaged"), "\(arguments): \(result.output)")
            }
            // SQLite's own -shm index (and an empty -wal) may appear beside a reader of a WAL
            // database; the database file and the lock file are byte-identical.
            var after = try Self.snapshot(directory)
            if after["offline.sqlite-wal"] == Data() { after["offline.sqlite-wal"] = nil }
            after["offline.sqlite-shm"] = nil
            #expect(after == before, "brick-queue changed the damaged store's files: \(Set(after.keys).union(before.keys).filter { after[$0] != before[$0] }.sorted())")

            let reopened = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
            #expect(reopened.recoveredFile != nil)
            #expect(reopened.recoveredEntries == 200)
            #expect(reopened.unreadableEntries == 0)
            #expect(Set(try await reopened.list(queue: "hooks").map(\.id)) == Set(ids))
            #expect(try await reopened.pausedQueues()["hooks"] != nil, "the pause was carried too")
        }
    }

    @Test("reads work beside a running worker (no lock, no migration); a change says to stop it or use its console (1)")
    func besideAWorker() async throws {
        try await withDirectory { directory in
            let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
            _ = try await store.add([OfflineEntry.Draft(queue: "hooks", payload: Data("x".utf8), createdAt: Date(), notBefore: Date().addingTimeInterval(3600))], dedupe: .reject)
            let status = try await Self.run(["--sqlite", store.path, "--json", "status"])
            #expect(status.status == 0, "\(status.output)")
            #expect(status.objects.first?["pending"] as? Int == 1)
            let list = try await Self.run(["--sqlite", store.path, "--json", "list", "hooks", "--limit", "9223372036854775807"])
            #expect(list.status == 0, "\(list.output)")
            #expect(list.objects.count == 1)
            let pause = try await Self.run(["--sqlite", store.path, "pause", "hooks"])
            #expect(pause.status == 1)
            #expect(pause.output.contains("stop it") && pause.output.contains("console"), "\(pause.output)")
            // The worker's store still works: the tool took nothing from it.
            _ = try await store.add([OfflineEntry.Draft(queue: "hooks", payload: Data("y".utf8), createdAt: Date())], dedupe: .reject)
        }
    }

    @Test("a row with absurd dates and counts (-1e300, 1e300, Int64.max) is shown, never trapped on, by status, list and show")
    func absurdRow() async throws {
        try await withDirectory { directory in
            let draft = OfflineEntry.Draft(queue: "hooks", payload: Data("x".utf8), createdAt: Date(), notBefore: Date().addingTimeInterval(3600))
            let path: String
            do {
                let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
                _ = try await store.add([draft], dedupe: .reject)
                path = store.path
            }
            do {
                let queue = try DatabaseQueue(path: path)
                try await queue.write { db in
                    try db.execute(sql: "UPDATE entry SET createdAt = -1e300, notBefore = 1e300, attempts = 9223372036854775807, expiresAt = -1e300")
                    try db.execute(sql: "INSERT INTO deliveryMinute (queue, minute, delivered, failed) VALUES ('hooks', 9223372036854775807, 1, 1), ('hooks', -9223372036854775807, 1, 1)")
                }
                try queue.close()
            }
            for arguments in [["status"], ["--json", "status"], ["list", "hooks"], ["show", draft.id.uuidString]] {
                let result = try await Self.run(["--sqlite", path] + arguments)
                #expect(result.status == 0, "\(arguments): \(result.output)")
            }
        }
    }
}
