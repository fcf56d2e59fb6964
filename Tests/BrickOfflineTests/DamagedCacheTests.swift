import BrickOfflineTestSupport
import BrickOffline
@_spi(TransportImplementation) import BrickRequest
import Foundation
import GRDB
import Testing

/// The response cache's file damaged column by column (a wrongly typed value, a NULL, text that
/// is not UTF-8), body files named outside the cache's folder or overwritten: every lookup is a
/// hit or a miss, never a trap, and nothing outside the cache is read or deleted.
@Suite("The response cache against damaged rows and files", .timeLimit(.minutes(2)))
struct DamagedCacheTests {
    /// Every column of `response` but `id` (an INTEGER PRIMARY KEY: SQLite refuses other values),
    /// and the two bookkeeping values.
    static let columns: [(table: String, name: String, kind: String)] = [
        ("response", "cacheKey", "text"), ("response", "variant", "text"), ("response", "status", "integer"),
        ("response", "headers", "blob"), ("response", "body", "blob"), ("response", "bodyFile", "text"),
        ("response", "bodyDigest", "integer"), ("response", "bodySize", "integer"), ("response", "url", "text"),
        ("response", "requestTime", "real"), ("response", "responseTime", "real"), ("response", "storedAt", "real"),
        ("response", "size", "integer"), ("response", "lastAccess", "real"), ("meta", "value", "integer"),
        ("total", "bytes", "integer"),
    ]

    static let cases: [(String, String, String, Damage)] = columns.flatMap { column in
        Damage.allCases.map { (column.table, column.name, column.kind, $0) }
    }

    /// The table again without its NOT NULL constraints (as a foreign build could have made it).
    static func loosen(_ table: String) -> String {
        switch table {
        case "response":
            return """
                ALTER TABLE response RENAME TO response_old;
                CREATE TABLE response (id INTEGER PRIMARY KEY, cacheKey TEXT, variant TEXT, status INTEGER,
                    headers BLOB, body BLOB, bodyFile TEXT, bodySize INTEGER, url TEXT, requestTime REAL,
                    responseTime REAL, storedAt REAL, size INTEGER, lastAccess REAL, bodyDigest INTEGER,
                    UNIQUE (cacheKey, variant));
                INSERT INTO response SELECT id, cacheKey, variant, status, headers, body, bodyFile, bodySize, url,
                    requestTime, responseTime, storedAt, size, lastAccess, bodyDigest FROM response_old;
                DROP TABLE response_old;
                """
        case "total":
            return "DROP TABLE total; CREATE TABLE total (id INTEGER PRIMARY KEY, bytes INTEGER); INSERT INTO total VALUES (0, 0);"
        default:
            return ""
        }
    }

    private func execute(in directory: URL, _ sql: String) throws {
        let database = try DatabaseQueue(path: directory.appendingPathComponent("damaged.cache.sqlite").path)
        try database.write { try $0.execute(sql: sql) }
        try database.close()
    }

    @Test("a damaged column is a miss or a hit, never a trap; a row that does not decode is removed", arguments: cases)
    func damagedColumn(table: String, column: String, kind: String, damage: Damage) async throws {
        try await withDirectory { directory in
            let url = "http://example.test/item"
            do {
                // A body over the threshold: in a file of its own, with its checksum.
                let cache = try SQLiteResponseCache(name: "damaged", directory: directory, fileThreshold: 8)
                try cache.store(stored(url, bytes: 64))
                try cache.flush()
            }
            let value = damage.sql(forColumnOf: kind)
            let condition = table == "meta" ? "WHERE name = 'version'" : ""
            try execute(in: directory, (damage == .null ? Self.loosen(table) : "") + "UPDATE \(table) SET \(column) = \(value) \(condition);")
            let cache = try SQLiteResponseCache(name: "damaged", directory: directory, fileThreshold: 8)
            let found = try cache.cachedResponses(for: key(url))
            if let response = found.first {
                #expect(response.body == stored(url, bytes: 64).body)
            }
            // Looked up again: still no trap, and a removed row stays removed.
            let again = try cache.cachedResponses(for: key(url))
            #expect(again.count == found.count)
            _ = try cache.count()
            _ = try cache.totalBytes()
            try cache.store(stored(url + "/other", bytes: 64))
            #expect(try cache.cachedResponses(for: key(url + "/other")).count == 1)
            try cache.removeAll()
            #expect(try cache.count() == 0)
            try cache.flush()
        }
    }

    @Test("a body file named outside the cache's folder is never served, and removeAll never deletes it")
    func bodyFileOutsideTheCache() async throws {
        try await withDirectory { directory in
            let victim = directory.appendingPathComponent("victim.txt").path
            try Data(repeating: 65, count: 64).write(to: URL(fileURLWithPath: victim))
            let url = "http://example.test/item"
            do {
                let cache = try SQLiteResponseCache(name: "damaged", directory: directory, fileThreshold: 8)
                try cache.store(stored(url, bytes: 64))
                try cache.flush()
            }
            // `../victim.txt`, relative to the bodies folder.
            try execute(in: directory, "UPDATE response SET bodyFile = '../victim.txt'")
            let cache = try SQLiteResponseCache(name: "damaged", directory: directory, fileThreshold: 8)
            #expect(try cache.cachedResponses(for: key(url)).isEmpty)
            #expect(cache.damagedRowsRemoved == 1)
            try cache.flush()
            try execute(in: directory, "INSERT INTO response (cacheKey, variant, status, headers, bodyFile, bodySize, url, requestTime, responseTime, storedAt, size, lastAccess) VALUES ('x', '', 200, x'', '../victim.txt', 64, 'x', 0, 0, 0, 1, 0)")
            try cache.removeAll()
            try cache.flush()
            #expect(FileManager.default.fileExists(atPath: victim), "a file outside the cache was deleted")
        }
    }

    @Test("a body file overwritten with other bytes of the same size is a miss (its checksum is checked)")
    func overwrittenBodyFile() async throws {
        try await withDirectory { directory in
            let url = "http://example.test/item"
            let cache = try SQLiteResponseCache(name: "checked", directory: directory, fileThreshold: 8)
            try cache.store(stored(url, bytes: 64))
            try cache.flush()
            #expect(try cache.cachedResponses(for: key(url)).count == 1)
            let bodies = cache.bodiesDirectory
            let files = try FileManager.default.contentsOfDirectory(atPath: bodies)
            #expect(files.count == 1)
            try Data(repeating: 0x5A, count: 64).write(to: URL(fileURLWithPath: bodies + "/" + files[0]))
            #expect(try cache.cachedResponses(for: key(url)).isEmpty)
            #expect(cache.damagedRowsRemoved == 1)
        }
    }
}

/// The cache's writes run on its own writer, never on the caller's thread.
@Suite("The response cache writes off the caller's thread", .timeLimit(.minutes(3)))
struct CacheWriterTests {
    @Test("store returns while another connection holds the write lock; the response is found at once, and on disk once the lock is gone")
    func storeDoesNotWaitForTheDisk() async throws {
        try await withDirectory { directory in
            let cache = try SQLiteResponseCache(name: "writer", directory: directory, fileThreshold: 8)
            let url = "http://example.test/item"
            let holder = try DatabaseQueue(path: directory.appendingPathComponent("writer.cache.sqlite").path)
            try holder.inTransaction(.exclusive) { _ in
                // A store on the caller's thread would wait here for the lock (5 s) and then fail.
                try cache.store(stored(url, bytes: 64))
                try cache.store(stored(url + "/2", bytes: 4))
                #expect(try cache.cachedResponses(for: key(url)).first?.body == stored(url, bytes: 64).body)
                try cache.removeCachedResponses(for: key(url + "/2"))
                #expect(try cache.cachedResponses(for: key(url + "/2")).isEmpty)
                return .commit
            }
            try holder.close()
            try cache.flush()
            let other = try SQLiteResponseCache(name: "writer", directory: directory, fileThreshold: 8)
            #expect(try other.cachedResponses(for: key(url)).count == 1)
            #expect(try other.cachedResponses(for: key(url + "/2")).isEmpty)
        }
    }
}
