import BrickOfflineTestSupport
import BrickOffline
@_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import GRDB
import HTTPTypes
import Testing

/// A cached GET on a session of the test's own.
final class DiskCachedGet: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    let cachePolicy: CachePolicy
    init(_ url: String, session: Session, policy: CachePolicy = .http) {
        self.urlString = url
        self.session = session
        self.cachePolicy = policy
        super.init()
    }
}

/// The same resource read as a model it does not fit.
final class MisfitGet: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DecodableResponseType {
    struct Model: Decodable, Sendable { var missing: [Int] }
    let urlString: String
    let session: Session
    var cachePolicy: CachePolicy { .cacheOnly }
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// FNV-1a, 64 bits, hex (as brick-offline-probe writes it in `X-Digest`).
func fnv1a(_ data: Data) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in data {
        hash ^= UInt64(byte)
        hash = hash &* 0x100_0000_01b3
    }
    return String(hash, radix: 16)
}

func stored(_ url: String, bytes: Int, fields: HTTPFields = [:]) -> CachedResponse {
    CachedResponse(
        key: CacheKey(method: "GET", url: url),
        variant: "",
        status: 200,
        headerFields: fields,
        body: Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0) }),
        url: url,
        requestTime: Date(),
        responseTime: Date()
    )
}

func key(_ url: String) -> CacheKey { CacheKey(method: "GET", url: url) }

/// A cached GET whose cache is declared `any ResponseCache`, as users write it.
final class ExistentialCacheGet: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    let cache: any ResponseCache
    var responseCache: any ResponseCache { cache }
    init(_ url: String, cache: any ResponseCache) {
        self.urlString = url
        self.cache = cache
        super.init()
    }
}

/// A cached GET whose cache is declared as an optional of a concrete type.
final class OptionalCacheGet: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    let cache: SQLiteResponseCache?
    var responseCache: SQLiteResponseCache? { cache }
    init(_ url: String, cache: SQLiteResponseCache?) {
        self.urlString = url
        self.cache = cache
        super.init()
    }
}

/// A cached GET whose declared cache is not a cache at all.
final class NotACacheGet: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    var responseCache: String { "api" }
    init(_ url: String) {
        self.urlString = url
        super.init()
    }
}

@Suite("A declared cache is used however it is spelled", .timeLimit(.minutes(3)))
struct DeclaredCacheTests {
    @Test("`any ResponseCache` and an optional SQLiteResponseCache: the response is in the file after flush(), and a new cache on the file (an app restarted offline) answers from it")
    func spellings() async throws {
        try await withDirectory { directory in
            let server = try await BrickTestServer.start()
            let existentialURL = server.baseURL + "/cache/existential?max_age=600"
            let optionalURL = server.baseURL + "/cache/optional?max_age=600"
            do {
                let cache = try SQLiteResponseCache(name: "declared", directory: directory)
                let first = await ExistentialCacheGet(existentialURL, cache: cache).response()
                #expect(first.source == .network)
                let second = await OptionalCacheGet(optionalURL, cache: cache).response()
                #expect(second.source == .network)
                try cache.flush()
                #expect(try cache.count() == 2)
            }
            await server.shutdown()
            // The server is gone: only the file can answer.
            let reopened = try SQLiteResponseCache(name: "declared", directory: directory)
            let offline = await ExistentialCacheGet(existentialURL, cache: reopened).response()
            #expect(offline.source == .cache)
            #expect(offline.status == .ok)
            let optional = await OptionalCacheGet(optionalURL, cache: reopened).response()
            #expect(optional.source == .cache)
        }
    }

    @Test("an optional declared nil uses the session's cache; a declared type that is not a cache fails every request with invalidRequest, unsent")
    func nilAndNotACache() async throws {
        let server = try await BrickTestServer.start()
        defer { Task { await server.shutdown() } }
        let url = server.baseURL + "/cache/session?max_age=600"
        let first = await OptionalCacheGet(url, cache: nil).response()
        #expect(first.source == .network)
        let second = await OptionalCacheGet(url, cache: nil).response()
        #expect(second.source == .cache)
        let misdeclared = await NotACacheGet(server.baseURL + "/cache/never?max_age=600").response()
        #expect(misdeclared.error?.code == .invalidRequest)
        #expect(misdeclared.error?.message.contains("String") == true)
        #expect(server.requests(path: "/cache/never").isEmpty)
    }
}

@Suite("SQLiteResponseCache on disk", .timeLimit(.minutes(3)))
struct SQLiteResponseCacheTests {
    @Test("survives a restart: a new cache object (and session) reads what the last one stored, with no server")
    func restart() async throws {
        try await withDirectory { directory in
            let url: String
            let body: Data?
            do {
                let server = try await BrickTestServer.start()
                url = server.baseURL + "/cache/profile?max_age=600"
                let cache = try SQLiteResponseCache(name: "api", directory: directory)
                let session = Session(configuration: .init(responseCache: cache))
                body = await DiskCachedGet(url, session: session).response().data
                // Stores are written by the cache's own writer, after the response is delivered;
                // another cache object (like another process) sees them once written.
                try cache.flush()
                await server.shutdown()
            }
            let session = Session(configuration: .init(responseCache: try SQLiteResponseCache(name: "api", directory: directory)))
            let read = await DiskCachedGet(url, session: session).response()
            #expect(read.source == .cache)
            #expect(!read.isStale)
            #expect(read.data == body)
            #expect(FileManager.default.fileExists(atPath: directory.path + "/api.cache.sqlite"))
        }
    }

    @Test(
        "on a full disk: requests still succeed from the network, what was stored before stays readable, storing works again once space is freed",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs")
    )
    func fullDisk() async throws {
        try await withDirectory { directory in
            let mountPoint = directory.appendingPathComponent("small").path
            try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
            try #require(DiskFullTests.shell("mount -t tmpfs -o size=512k tmpfs '\(mountPoint)'") == 0, "mount failed")
            defer { _ = try? DiskFullTests.shell("umount '\(mountPoint)'") }
            let server = try await BrickTestServer.start()
            defer { Task { await server.shutdown() } }
            let cache = try SQLiteResponseCache(name: "api", directory: URL(fileURLWithPath: mountPoint))
            let session = Session(configuration: .init(responseCache: cache))
            let kept = server.baseURL + "/cache/kept?max_age=600"
            let keptBody = await DiskCachedGet(kept, session: session).response().data
            try cache.flush()
            #expect(try cache.count() == 1)
            // Fill the disk: a file grows until the kernel says no.
            let filler = mountPoint + "/filler"
            _ = try DiskFullTests.shell("dd if=/dev/zero of='\(filler)' bs=4k 2>/dev/null")
            for index in 0..<20 {
                let response = await DiskCachedGet(server.baseURL + "/cache/new\(index)?max_age=600", session: session).response()
                #expect(response.status?.code == 200, "request \(index): \(String(describing: response.error))")
                #expect(response.source == .network)
            }
            #expect(throws: BrickError.self, "the disk is full") { try cache.flush() }
            #expect(try cache.count() == 1, "nothing was stored on the full disk")
            // Stored before the disk filled: still there, still served without the server.
            let again = await DiskCachedGet(kept, session: session).response()
            #expect(again.source == .cache)
            #expect(again.data == keptBody)
            #expect(try cache.integrityCheck() == "ok")
            // Space freed: the next response is stored and served from the cache.
            try FileManager.default.removeItem(atPath: filler)
            let later = server.baseURL + "/cache/later?max_age=600"
            _ = await DiskCachedGet(later, session: session).response()
            try cache.flush()
            #expect(await DiskCachedGet(later, session: session).response().source == .cache)
        }
    }

    @Test("two openers of a new cache file at the same moment both succeed (as two processes do)")
    func concurrentFirstOpen() async throws {
        for _ in 0..<30 {
            let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: path) }
            let directory = URL(fileURLWithPath: path)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let opened = await withTaskGroup(of: String.self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        do {
                            _ = try SQLiteResponseCache(name: "shared", directory: directory)
                            return "opened"
                        } catch {
                            return "\(error)"
                        }
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
            #expect(opened == ["opened", "opened", "opened"])
        }
    }

    @Test("MiniCache: named caches share nothing; a missing key is a miss; remove one; remove all")
    func namesAndRemoval() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = URL(fileURLWithPath: path)
        let first = try SQLiteResponseCache(name: "first", directory: directory)
        let second = try SQLiteResponseCache(name: "second", directory: directory)
        #expect(try first.cachedResponses(for: key("http://h/a")).isEmpty)
        try first.store(stored("http://h/a", bytes: 10))
        try first.store(stored("http://h/b", bytes: 20))
        #expect(try first.cachedResponses(for: key("http://h/a")).first?.body.count == 10)
        #expect(try second.cachedResponses(for: key("http://h/a")).isEmpty)
        try second.store(stored("http://h/a", bytes: 30))
        #expect(try first.cachedResponses(for: key("http://h/a")).first?.body.count == 10, "the other cache's write changed nothing")
        try first.removeCachedResponses(for: key("http://h/a"))
        #expect(try first.cachedResponses(for: key("http://h/a")).isEmpty)
        #expect(try first.count() == 1)
        try first.removeAll()
        #expect(try first.count() == 0)
        #expect(try first.totalBytes() == 0)
        #expect(try second.count() == 1)
    }


    @Test("a response stored again under its key is read with its new header fields and times, never with what was parsed from the old row")
    func parsedHeadersFollowTheRow() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cache = try SQLiteResponseCache(name: "reparse", directory: URL(fileURLWithPath: path))
        let url = "http://h/a"
        func response(etag: String, maxAge: Int, at time: Date) -> CachedResponse {
            var fields = HTTPFields()
            fields[.eTag] = etag
            fields[.cacheControl] = "max-age=\(maxAge)"
            return CachedResponse(
                key: key(url), variant: "", status: 200, headerFields: fields, body: Data("x".utf8), url: url,
                requestTime: time, responseTime: time
            )
        }
        let first = Date(timeIntervalSince1970: 1_700_000_000)
        for round in 0..<40 {
            // Every other round keeps the header block and changes only the times; the others change it.
            let etag = "\"v\(round / 2)\""
            let time = first.addingTimeInterval(Double(round))
            try cache.store(response(etag: etag, maxAge: round / 2, at: time))
            try cache.flush()  // read from the file, not from the writes pending in memory
            for _ in 0..<2 {
                let read = try #require(try cache.cachedResponses(for: key(url)).first)
                #expect(read.headerFields[.eTag] == etag)
                #expect(read.facts.entityTag == etag)
                #expect(read.facts.lifetime == .seconds(round / 2))
                #expect(read.responseTime == time)
                #expect(read.facts.responseTime == time)
            }
        }
    }
    @Test("MiniCache: another version drops every entry; the same version keeps them")
    func versions() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = URL(fileURLWithPath: path)
        do {
            let cache = try SQLiteResponseCache(name: "v", directory: directory, version: 1, fileThreshold: 100)
            try cache.store(stored("http://h/small", bytes: 10))
            try cache.store(stored("http://h/big", bytes: 1000))
            try cache.flush()
        }
        #expect(try SQLiteResponseCache(name: "v", directory: directory, version: 1).count() == 2)
        let newer = try SQLiteResponseCache(name: "v", directory: directory, version: 2)
        #expect(try newer.count() == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: newer.bodiesDirectory).isEmpty, "body files went too")
        try newer.store(stored("http://h/small", bytes: 5))
        #expect(try newer.cachedResponses(for: key("http://h/small")).first?.body.count == 5)
    }

    @Test("MiniCache: a garbage file is moved aside and a working cache made in its place")
    func corruptFile() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let garbage = Data((0..<8192).map { _ in UInt8.random(in: 0...255) })
        try garbage.write(to: URL(fileURLWithPath: path + "/broken.cache.sqlite"))
        let cache = try SQLiteResponseCache(name: "broken", directory: URL(fileURLWithPath: path))
        let aside = try #require(cache.recoveredFile)
        #expect(FileManager.default.contents(atPath: aside) == garbage)
        #expect(try cache.cachedResponses(for: key("http://h/a")).isEmpty)
        try cache.store(stored("http://h/a", bytes: 10))
        #expect(try cache.cachedResponses(for: key("http://h/a")).count == 1)
        #expect(try cache.integrityCheck() == "ok")
    }

    @Test("a cache file that looks damaged while another opener uses it is not moved aside; once that opener closed it, it is")
    func damagedWhileInUse() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = URL(fileURLWithPath: path)
        var first: SQLiteResponseCache? = try SQLiteResponseCache(name: "shared", directory: directory)
        try first?.store(stored("http://h/a", bytes: 10))
        try first?.flush()
        // The file and its log overwritten with garbage while `first` has them open.
        try Data((0..<8192).map { _ in UInt8.random(in: 0...255) }).write(to: directory.appendingPathComponent("shared.cache.sqlite"))
        truncate(path + "/shared.cache.sqlite-wal", 0)
        do {
            _ = try SQLiteResponseCache(name: "shared", directory: directory)
            Issue.record("a damaged file opened")
        } catch {
            #expect(error.code == .storage)
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: path)
        #expect(!files.contains { $0.contains(".corrupt-") }, "moved aside while in use: \(files)")
        first = nil
        let alone = try SQLiteResponseCache(name: "shared", directory: directory)
        #expect(alone.recoveredFile != nil)
    }

    @Test("MiniCache: a stored body that does not decode as the model is a serialization error; other keys are untouched")
    func typeMismatch() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let session = Session(configuration: .init(responseCache: try SQLiteResponseCache(name: "m", directory: directory)))
                let url = server.baseURL + "/cache/model?max_age=600"
                let other = server.baseURL + "/cache/other?max_age=600"
                _ = await DiskCachedGet(url, session: session).response()
                _ = await DiskCachedGet(other, session: session).response()
                let misfit = await MisfitGet(url, session: session).response()
                #expect(misfit.error?.code == .serializationFailed)
                #expect(misfit.source == .cache)
                #expect(await DiskCachedGet(other, session: session, policy: .cacheOnly).response().value != nil)
                #expect(await DiskCachedGet(url, session: session, policy: .cacheOnly).response().value != nil)
            }
        }
    }

    @Test("large bodies live in files; a body file that went missing is a miss, not a crash")
    func bodyFiles() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cache = try SQLiteResponseCache(name: "files", directory: URL(fileURLWithPath: path), fileThreshold: 1000)
        try cache.store(stored("http://h/big", bytes: 200_000))
        try cache.store(stored("http://h/small", bytes: 500))
        try cache.flush()
        let files = try FileManager.default.contentsOfDirectory(atPath: cache.bodiesDirectory)
        #expect(files.count == 1)
        #expect(try cache.cachedResponses(for: key("http://h/big")).first?.body == stored("http://h/big", bytes: 200_000).body)
        // Replacing the entry replaces its file.
        try cache.store(stored("http://h/big", bytes: 100_000))
        try cache.flush()
        let replaced = try FileManager.default.contentsOfDirectory(atPath: cache.bodiesDirectory)
        #expect(replaced.count == 1 && replaced != files)
        try FileManager.default.removeItem(atPath: cache.bodiesDirectory + "/" + replaced[0])
        #expect(try cache.cachedResponses(for: key("http://h/big")).isEmpty)
        #expect(try cache.cachedResponses(for: key("http://h/small")).count == 1)
    }

    @Test("eviction keeps the cache under its bound, least recently used first")
    func eviction() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cache = try SQLiteResponseCache(
            name: "lru",
            directory: URL(fileURLWithPath: path),
            maxBytes: 100_000,
            fileThreshold: 3000
        )
        for index in 0..<10 { try cache.store(stored("http://h/\(index)", bytes: 5000)) }
        // Entry 0 is read (used) before the cache overflows: it outlives entries 1, 2, ….
        _ = try cache.cachedResponses(for: key("http://h/0"))
        for index in 10..<60 { try cache.store(stored("http://h/\(index)", bytes: 5000)) }
        #expect(try cache.totalBytes() <= 100_000)
        #expect(try cache.count() < 60)
        #expect(try cache.cachedResponses(for: key("http://h/1")).isEmpty)
        #expect(try cache.cachedResponses(for: key("http://h/59")).count == 1)
        // Files of evicted entries are deleted with them.
        let files = try FileManager.default.contentsOfDirectory(atPath: cache.bodiesDirectory)
        #expect(files.count == (try cache.count()))
        // A response over a quarter of the bound is not stored at all.
        try cache.store(stored("http://h/huge", bytes: 30_000))
        #expect(try cache.cachedResponses(for: key("http://h/huge")).isEmpty)
    }

    @Test("8 threads reading 16 keys while their responses are stored again and again: every read is one whole response, its body the one its header fields name")
    func concurrentReadsWhileStoring() async throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cache = try SQLiteResponseCache(name: "concurrent", directory: URL(fileURLWithPath: path))
        @Sendable func response(_ index: Int, version: Int) -> CachedResponse {
            let url = "http://h/\(index)"
            var fields = HTTPFields()
            fields[.eTag] = "\"\(index)-\(version)\""
            fields[.cacheControl] = "max-age=\(version)"
            return CachedResponse(
                key: key(url), variant: "", status: 200, headerFields: fields,
                body: Data("\(index)-\(version)|".utf8 + Array(repeating: UInt8(version % 251), count: 100 + version)),
                url: url, requestTime: Date(), responseTime: Date()
            )
        }
        for index in 0..<16 { try cache.store(response(index, version: 0)) }
        try cache.flush()
        // Threads of their own, off the cooperative pool: reads and flushes block, and a whole
        // suite runs beside this test.
        let writer = Task {
            try await Subprocess.offPool {
                for version in 1...60 {
                    for index in 0..<16 { try cache.store(response(index, version: version)) }
                    try cache.flush()  // each round reaches the file, where the readers read it
                }
            }
        }
        let readers = (0..<8).map { reader in
            Task {
                try await Subprocess.offPool { () throws -> [String] in
                    var wrong: [String] = []
                    for round in 0..<400 {
                        let index = (reader * 7 + round) % 16
                        guard let read = try cache.cachedResponses(for: key("http://h/\(index)")).first,
                            let tag = read.headerFields[.eTag],
                            let version = Int(tag.dropFirst().dropLast().split(separator: "-").last ?? "")
                        else {
                            wrong.append("key \(index): no response, or no version in its ETag")
                            continue
                        }
                        if read.body != response(index, version: version).body { wrong.append("\(tag): another body") }
                        if read.facts.lifetime != .seconds(version) { wrong.append("\(tag): lifetime \(read.facts.lifetime)") }
                    }
                    return wrong
                }
            }
        }
        var wrong: [String] = []
        for reader in readers { wrong += try await reader.value }
        try await writer.value
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
        #expect(cache.damagedRowsRemoved == 0)
        #expect(try cache.integrityCheck() == "ok")
    }

    @Test("a read writes nothing; the uses it noted are recorded by the next store or flush")
    func readsWriteNothing() throws {
        let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cache = try SQLiteResponseCache(name: "reads", directory: URL(fileURLWithPath: path))
        try cache.store(stored("http://h/a", bytes: 100))
        try cache.flush()
        let observer = try DatabaseQueue(path: cache.path)
        func lastAccess() throws -> Double {
            try observer.read { db in try Double.fetchOne(db, sql: "SELECT lastAccess FROM response") ?? 0 }
        }
        let (version, before) = try (observer.read { db in try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0 }, lastAccess())
        let enqueued = cache.writesEnqueued
        for _ in 0..<100 { #expect(try cache.cachedResponses(for: key("http://h/a")).count == 1) }
        // Nothing was handed to the writer, and the file did not change.
        #expect(cache.writesEnqueued == enqueued)
        #expect(try observer.read { db in try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0 } == version)
        #expect(try lastAccess() == before)
        // The use is recorded by the next flush (or store), not by the reads.
        try cache.flush()
        #expect(try lastAccess() > before)
    }

    @Test("a second process reads what the first stored")
    func secondProcess() async throws {
        try await withDirectory { directory in
            let lines = try await CrashTests.Probe(["cache-store", directory.path, "shared", "200"]).wait()
            #expect(lines.last == "stored 200")
            let cache = try SQLiteResponseCache(name: "shared", directory: directory)
            #expect(try cache.count() == 200)
            for index in [0, 99, 199] {
                let read = try cache.cachedResponses(for: key("http://probe/item/\(index)"))
                #expect(read.first.map { String(decoding: $0.body, as: UTF8.self) } == "item \(index)")
            }
        }
    }

    @Test("kill -9 during writes, 8 times, while this process reads: readable, integrity ok, no half entry")
    func killDuringWrites() async throws {
        try await withDirectory { directory in
            var acknowledged = 0
            var checked = 0
            for cycle in 0..<8 {
                let probe = try CrashTests.Probe(["cache-write", directory.path, "crash"])
                let reader = try SQLiteResponseCache(name: "crash", directory: directory, maxBytes: 64 * 1024 * 1024)
                // Reading while the other process writes, until it has acknowledged 8 stores (an
                // event: a fixed 300–700 ms left a slow-starting writer under ThreadSanitizer on a
                // loaded machine with too few) and a random moment after, mid-write.
                var killAt: ContinuousClock.Instant?
                let giveUp = ContinuousClock.now + .seconds(60)
                while killAt.map({ ContinuousClock.now < $0 }) ?? true {
                    // Every response read is whole.
                    for index in 0..<50 {
                        for response in try reader.cachedResponses(for: key("http://probe/k/\(index)")) {
                            #expect(response.headerFields[HTTPField.Name("X-Digest")!] == fnv1a(response.body))
                            checked += 1
                        }
                    }
                    if killAt == nil, probe.lines().filter({ $0.hasPrefix("ack ") }).count >= 8 {
                        killAt = ContinuousClock.now + .milliseconds(Int.random(in: 0...300))
                    }
                    if killAt == nil, ContinuousClock.now > giveUp {
                        Issue.record("cycle \(cycle): the writer acknowledged fewer than 8 stores in 60 s")
                        break
                    }
                    // The other tests' turn: this loop runs on a cooperative thread.
                    await Task.yield()
                }
                let lines = await probe.kill()
                acknowledged += lines.filter { $0.hasPrefix("ack ") }.count
                let cache = try SQLiteResponseCache(name: "crash", directory: directory, maxBytes: 64 * 1024 * 1024)
                #expect(try cache.integrityCheck() == "ok", "cycle \(cycle)")
                for index in 0..<50 {
                    for response in try cache.cachedResponses(for: key("http://probe/k/\(index)")) {
                        #expect(
                            response.headerFields[HTTPField.Name("X-Digest")!] == fnv1a(response.body),
                            "cycle \(cycle): key \(index) holds a half entry"
                        )
                        checked += 1
                    }
                }
            }
            #expect(acknowledged > 50, "only \(acknowledged) stores acknowledged")
            #expect(checked > 50)
            print("cache crash: \(acknowledged) stores over 8 kills, \(checked) responses read whole")
        }
    }
}

extension Thread {
    /// Runs `body` on a thread of its own (not the cooperative pool, which a blocking open could
    /// starve) and hands back its result.
    static func detachedResult<T: Sendable>(_ body: @escaping @Sendable () -> T) -> Task<T, Never> {
        Task {
            await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: body()) }
            }
        }
    }
}

/// A suite of its own, with room for its 150 process starts under a sanitizer's slowdown.
@Suite("Many first opens of one new cache file", .timeLimit(.minutes(5)))
struct ManyFirstOpensTests {
    @Test("a new cache file opened at once by 8 threads and 3 processes, 50 times: every opener succeeds")
    func manyFirstOpens() async throws {
        for round in 0..<50 {
            let path = NSTemporaryDirectory() + "brick-cache-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: path) }
            let directory = URL(fileURLWithPath: path)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let probe = CrashTests.probePath
            // Three processes, started together by one shell, beside eight threads of this one.
            let processes = Thread.detachedResult {
                (try? Subprocess.runBlocking(
                    "for i in 1 2 3; do '\(probe)' cache-open '\(path)' shared & done; wait"
                )) ?? "the shell failed"
            }
            let threads = (0..<8).map { _ in
                Thread.detachedResult { () -> String in
                    do {
                        _ = try SQLiteResponseCache(name: "shared", directory: directory)
                        return "opened"
                    } catch {
                        return "\(error)"
                    }
                }
            }
            var outcomes: [String] = []
            for thread in threads { outcomes.append(await thread.value) }
            let printed = await processes.value.split(separator: "\n").map(String.init)
            #expect(outcomes.allSatisfy { $0 == "opened" }, "round \(round): \(outcomes)")
            #expect(printed.sorted() == ["opened", "opened", "opened"], "round \(round): \(printed)")
        }
    }
}
