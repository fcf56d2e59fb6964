// cache-bench [ITERATIONS]
// cache-bench contention [STORES]
//
// The response cache's figures, in one run, against BrickTestServer on loopback:
//   - a plain dictionary lookup under a lock (the floor any cache pays);
//   - a store's own lookup: InMemoryResponseCache and SQLiteResponseCache `cachedResponses(for:)`;
//   - a whole `.http` hit through an endpoint (`try await endpoint.value`, a fresh stored response:
//     key, lookup, the RFC 9111 rules, validation, serialization), for both stores;
//   - an endpoint with `.networkOnly` fetching a body of the same size: one loopback round trip per
//     request, for comparison.
// Each row: operations, seconds, operations per second, microseconds per operation.
//
// `contention`: the latency of unrelated requests (a 16-byte GET, one at a time, `.networkOnly`)
// on a transport whose other requests store STORES (default 10,000) distinct 64 KiB responses in
// a SQLiteResponseCache (4 at a time): p50, p99 and the largest, beside the same requests with
// nothing else running. BRICK_BENCH_RESUME_AT_SAFE_POINT=1 turns the transport's opt-in
// `resumesTasksAtSafePoint` on (the cache's disk work then runs where awaiting tasks resume: on
// the transport's thread, at its safe point).
import BrickOffline
@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

final class Item: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    let cachePolicy: CachePolicy
    init(_ url: String, session: Session, policy: CachePolicy) {
        self.urlString = url
        self.session = session
        self.cachePolicy = policy
        super.init()
    }
}

let clock = ContinuousClock()

/// The latencies' p50, p99 and maximum, in microseconds.
func percentiles(_ samples: [Duration]) -> String {
    let sorted = samples.sorted()
    func micros(_ value: Duration) -> String {
        String(format: "%.0f", Double(value.components.seconds) * 1e6 + Double(value.components.attoseconds) / 1e12)
    }
    guard !sorted.isEmpty else { return "no samples" }
    return "n=\(sorted.count) p50 \(micros(sorted[sorted.count / 2])) µs, p99 \(micros(sorted[min(sorted.count - 1, sorted.count * 99 / 100)])) µs, max \(micros(sorted.last!)) µs"
}

if CommandLine.arguments.dropFirst().first == "contention" {
    let stores = CommandLine.arguments.dropFirst(2).first.flatMap { Int($0) } ?? 10_000
    let server = try BrickTestServer.start()
    let big = [UInt8](repeating: 0x61, count: 64 * 1024)
    server.route("/big") { _ in .respond(status: 200, headers: [.init("Cache-Control", "max-age=3600")], body: big) }
    var configuration = CurlTransport.Configuration()
    configuration.resumesTasksAtSafePoint = ProcessInfo.processInfo.environment["BRICK_BENCH_RESUME_AT_SAFE_POINT"] == "1"
    let transport = CurlTransport(configuration: configuration)
    let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("cache-contention-\(getpid())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let disk = try SQLiteResponseCache(name: "contention", directory: directory, maxBytes: 1 << 30)
    let storing = Session(configuration: .init(responseCache: disk), transport: transport, reachability: AlwaysReachable())
    let probing = Session(transport: transport, reachability: AlwaysReachable())
    let small = server.baseURL + "/bytes/16"
    func probe(while running: () -> Bool) async throws -> [Duration] {
        var samples: [Duration] = []
        while running() {
            let start = clock.now
            _ = try await Item(small, session: probing, policy: .networkOnly).value
            samples.append(clock.now - start)
        }
        return samples
    }
    // Alone first: the same probe for as many samples, with nothing else running.
    var alone: [Duration] = []
    for _ in 0..<2_000 {
        let start = clock.now
        _ = try await Item(small, session: probing, policy: .networkOnly).value
        alone.append(clock.now - start)
    }
    let done = Mutex(false)
    let storer = Task {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    for index in stride(from: worker, to: stores, by: 4) {
                        _ = try await Item(server.baseURL + "/big?i=\(index)", session: storing, policy: .http).value
                    }
                }
            }
            try await group.waitForAll()
        }
        // The probe goes on until the cache's writer has written everything it accepted (waited
        // for on a thread of its own: blocking one of the two cooperative threads would stall the probe).
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                try? disk.flush()
                continuation.resume()
            }
        }
        done.withLock { $0 = true }
    }
    let start = clock.now
    let busy = try await probe { !done.withLock { $0 } }
    try await storer.value
    let elapsed = clock.now - start
    print("resumesTasksAtSafePoint=\(configuration.resumesTasksAtSafePoint) (captures: \(transport.capturesResumedTasks)); \(stores) × 64 KiB fetched and written in \(elapsed); stored now: \(try disk.count()) (the writer declines stores past its backlog bound)")
    print("unrelated GETs alone:            \(percentiles(alone))")
    print("unrelated GETs while storing:    \(percentiles(busy))")
    print("stall takeovers: \(transport.stallTakeoverCount)")
    server.shutdown()
    exit(0)
}

let iterations = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 100_000

/// Runs `body` (`count` operations), prints its row, and returns microseconds per operation.
@discardableResult
func row(_ name: String, _ count: Int, _ body: () async throws -> Void) async rethrows -> Double {
    let start = clock.now
    try await body()
    let elapsed = clock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let perSecond = Double(count) / seconds
    print(
        "| \(name) | \(count) | \(String(format: "%.3f", seconds)) | \(String(format: "%.0f", perSecond)) | \(String(format: "%.2f", 1e6 / perSecond)) |"
    )
    return 1e6 / perSecond
}

let server = try BrickTestServer.start()
let url = server.baseURL + "/cache/bench?max_age=3600"
let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("cache-bench-\(getpid())")
defer { try? FileManager.default.removeItem(at: directory) }
let memory = InMemoryResponseCache()
let disk = try SQLiteResponseCache(name: "bench", directory: directory)
let memorySession = Session(configuration: .init(responseCache: memory), reachability: AlwaysReachable())
let diskSession = Session(configuration: .init(responseCache: disk), reachability: AlwaysReachable())
let body = try await Item(url, session: memorySession, policy: .http).value
_ = try await Item(url, session: diskSession, policy: .http).value
let key = CacheKey(method: "GET", url: url)
print("body \(body.count) bytes; \(iterations) iterations (network rows: \(iterations / 10))")
print("")
print("| operation | ops | seconds | ops/s | µs/op |")
print("|---|---:|---:|---:|---:|")

let dictionary = Mutex<[String: Data]>([key.description: body])
var found = 0
await row("dictionary lookup under a lock", iterations) {
    for _ in 0..<iterations { found &+= dictionary.withLock { $0[key.description]?.count ?? 0 } }
}
await row("InMemoryResponseCache.cachedResponses", iterations) {
    for _ in 0..<iterations { found &+= memory.cachedResponses(for: key).count }
}
try await row("SQLiteResponseCache.cachedResponses", iterations / 10) {
    for _ in 0..<iterations / 10 { found &+= try disk.cachedResponses(for: key).count }
}
// The baseline, in the same run on the same file: a point read of the stored row and its body
// through GRDB (the cache's library) without the cache's layers.
try disk.flush()
let raw = try DatabasePool(path: disk.path)
let rawRead = try await row("raw SQLite point read (GRDB: the row, its headers and body)", iterations / 10) {
    for _ in 0..<iterations / 10 {
        found &+= try raw.read { db -> Int in
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT * FROM response WHERE cacheKey = ?"),
                arguments: [key.description]
            )
            let headers: Data = row?["headers"] ?? Data()
            let body: Data = row?["body"] ?? Data()
            return headers.count + body.count
        }
    }
}
// The issue's yardstick: the same point read through SQLite's C API (one connection, the statement
// prepared once, the headers and body copied out) — what any layer above SQLite starts from.
var connection: OpaquePointer?
guard sqlite3_open_v2(disk.path, &connection, SQLITE_OPEN_READONLY, nil) == SQLITE_OK,
    let connection
else { fatalError("cannot open \(disk.path)") }
var statement: OpaquePointer?
guard sqlite3_prepare_v3(connection, "SELECT headers, body FROM response WHERE cacheKey = ?1", -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK,
    let statement
else { fatalError(String(cString: sqlite3_errmsg(connection))) }
let keyText = key.description
let cRead = await row("raw SQLite point read (C API: the row's headers and body copied)", iterations / 10) {
    for _ in 0..<iterations / 10 {
        keyText.withCString { _ = sqlite3_bind_text(statement, 1, $0, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self)) }
        if sqlite3_step(statement) == SQLITE_ROW {
            let headers = Data(bytes: sqlite3_column_blob(statement, 0), count: Int(sqlite3_column_bytes(statement, 0)))
            let body = Data(bytes: sqlite3_column_blob(statement, 1), count: Int(sqlite3_column_bytes(statement, 1)))
            found &+= headers.count + body.count
        }
        sqlite3_reset(statement)
    }
}
sqlite3_finalize(statement)
sqlite3_close(connection)
let memoryHit = try await row(".http hit, in memory (endpoint.value)", iterations) {
    for _ in 0..<iterations { found &+= try await Item(url, session: memorySession, policy: .http).value.count }
}
let diskHit = try await row(".http hit, SQLite (endpoint.value)", iterations / 10) {
    for _ in 0..<iterations / 10 { found &+= try await Item(url, session: diskSession, policy: .http).value.count }
}
// The same size of body from a route that does no date formatting: the round trip itself.
let plain = server.baseURL + "/bytes/\(body.count)"
try await row("loopback round trip (.networkOnly, /bytes)", iterations / 10) {
    for _ in 0..<iterations / 10 { found &+= try await Item(plain, session: memorySession, policy: .networkOnly).value.count }
}
print("")
print(
    "SQLite hit through endpoint.value = \(String(format: "%.2f", diskHit / (rawRead + memoryHit)))× "
        + "(raw point read + in-memory hit: \(String(format: "%.2f", rawRead)) + \(String(format: "%.2f", memoryHit)) µs)"
)
print(
    "SQLite hit through endpoint.value = \(String(format: "%.2f", diskHit / (cRead + memoryHit)))× "
        + "(raw C-level point read + in-memory hit: \(String(format: "%.2f", cRead)) + \(String(format: "%.2f", memoryHit)) µs)"
)
print("(checksum \(found))")
server.shutdown()
