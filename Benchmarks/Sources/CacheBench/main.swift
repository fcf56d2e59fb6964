// cache-bench [ITERATIONS]
//
// The response cache's figures, in one run, against BrickTestServer on loopback:
//   - a plain dictionary lookup under a lock (the floor any cache pays);
//   - a store's own lookup: InMemoryResponseCache and SQLiteResponseCache `cachedResponses(for:)`;
//   - a whole `.http` hit through an endpoint (`try await endpoint.value`, a fresh stored response:
//     key, lookup, the RFC 9111 rules, validation, serialization), for both stores;
//   - an endpoint with `.networkOnly` fetching a body of the same size: one loopback round trip per
//     request, for comparison.
// Each row: operations, seconds, operations per second, microseconds per operation.
import BrickOffline
import BrickRequest
import BrickTestServer
import Foundation
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

let iterations = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 100_000
let clock = ContinuousClock()

func row(_ name: String, _ count: Int, _ body: () async throws -> Void) async rethrows {
    let start = clock.now
    try await body()
    let elapsed = clock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let perSecond = Double(count) / seconds
    print(
        "| \(name) | \(count) | \(String(format: "%.3f", seconds)) | \(String(format: "%.0f", perSecond)) | \(String(format: "%.2f", 1e6 / perSecond)) |"
    )
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
try await row(".http hit, in memory (endpoint.value)", iterations) {
    for _ in 0..<iterations { found &+= try await Item(url, session: memorySession, policy: .http).value.count }
}
try await row(".http hit, SQLite (endpoint.value)", iterations / 10) {
    for _ in 0..<iterations / 10 { found &+= try await Item(url, session: diskSession, policy: .http).value.count }
}
// The same size of body from a route that does no date formatting: the round trip itself.
let plain = server.baseURL + "/bytes/\(body.count)"
try await row("loopback round trip (.networkOnly, /bytes)", iterations / 10) {
    for _ in 0..<iterations / 10 { found &+= try await Item(plain, session: memorySession, policy: .networkOnly).value.count }
}
print("")
print("(checksum \(found))")
server.shutdown()
