// fleet-bench: the offline queue on PostgreSQL beside SQLite, in one run.
//
//   eval "$(../Scripts/private-postgres.sh start /tmp/brick-pg)"   # or any database named by PG*
//   swift run -c release fleet-bench
//
// Prints, each against a fresh schema (and a fresh SQLite file in /tmp for the baseline):
//   - durable adds/s through PersistentRequestQueue.add with 1 and 16 producers, and a bulk add
//     (10,000 entries in one store call), with NOTIFY and poll-only (no NOTIFY), and on SQLite;
//   - deliveries/s to a loopback BrickTestServer with 1, 2 and 4 workers (each a queue with its own
//     store object and connection pool, in this process; cap 16 per fleet);
//   - add → attempt start (the server receiving it) p50/p99, one idle worker, NOTIFY and poll-only;
//   - with `adds` as its argument: only the adds, NOTIFY and poll-only alternating, 4 rounds;
//   - reclaim time: a worker leases entries and dies (its lease is never extended); the time until
//     another worker's attempt reaches the server, p50/p99, against the lease length.
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import BrickTestServer
import Foundation
import Logging
import PostgresNIO

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func milliseconds(_ duration: Duration) -> String { String(format: "%.1f", seconds(duration) * 1000) }

func percentile(_ values: [Duration], _ p: Double) -> Duration {
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
}

/// Prints a line at once (a pipe would hold `print`'s output until the end).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
var logger = Logger(label: "fleet-bench")
logger.logLevel = .warning
let configuration = try PostgresOfflineStore.clientConfiguration()
/// The clients' run tasks, cancelled at the end.
final class Clients: @unchecked Sendable {  // touched by the main task only, one call at a time
    var tasks: [Task<Void, Never>] = []
}
let clients = Clients()
func makeStore(schema: String, wakeUps: PostgresOfflineStore.WakeUps = .notify(), lease: Duration = .seconds(10))
    async throws -> PostgresOfflineStore
{
    var configuration = configuration
    configuration.options.maximumConnections = 20
    let client = PostgresClient(configuration: configuration)
    clients.tasks.append(Task { await client.run() })
    return try await PostgresOfflineStore(client: client, schema: schema, leaseDuration: lease, wakeUps: wakeUps, logger: logger)
}
func freshSchema(_ label: String) -> String { "bench_\(label)_\(UUID().uuidString.prefix(8).lowercased())" }

let clock = ContinuousClock()
let session = Session(reachability: AlwaysReachable())
let later = PersistentRequestQueue.EntryOptions(notBefore: .distantFuture)
let request = try TransportRequest(
    method: .post,
    url: "http://127.0.0.1:9/sales",
    headers: [("Content-Type", "application/json")],
    body: .data(Data(#"{"sku":"brick-2x4","amount":12}"#.utf8))
)

func addsPerSecond(_ queue: PersistentRequestQueue, producers: Int, each: Int) async throws -> Double {
    let elapsed = try await clock.measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<producers {
                group.addTask { for _ in 0..<each { try await queue.add(request, options: later) } }
            }
            try await group.waitForAll()
        }
    }
    return Double(producers * each) / seconds(elapsed)
}

func bulkPerSecond(_ store: any OfflineStore, queue: String, count: Int) async throws -> Double {
    let drafts = (0..<count).map { _ in
        OfflineEntry.Draft(queue: queue, payload: Data(repeating: 0x61, count: 600), createdAt: Date(), notBefore: .distantFuture)
    }
    let elapsed = try await clock.measure { _ = try await store.add(drafts, dedupe: .reject) }
    return Double(count) / seconds(elapsed)
}

// MARK: - Adds, interleaved (`fleet-bench adds`): NOTIFY and poll-only, alternating, 4 rounds
if CommandLine.arguments.dropFirst().first == "adds" {
    say("| round | 1 producer NOTIFY | 1 producer poll-only | ratio | 16 producers NOTIFY | 16 poll-only | ratio |")
    say("|---:|---:|---:|---:|---:|---:|---:|")
    for round in 1...4 {
        var figures: [Double] = []
        for producers in [1, 16] {
            for wakeUps in [PostgresOfflineStore.WakeUps.notify(), .pollOnly()] {
                let store = try await makeStore(schema: freshSchema("ab"), wakeUps: wakeUps)
                let queue = PersistentRequestQueue(name: "adds", store: store, session: session)
                figures.append(try await addsPerSecond(queue, producers: producers, each: producers == 1 ? 1_500 : 500))
            }
        }
        say(String(format: "| %d | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |", round, figures[0], figures[1],
                   figures[0] / figures[1], figures[2], figures[3], figures[2] / figures[3]))
    }
    exit(0)
}

// MARK: - Adds
say("## Adds (durable: an add returns once committed)\n")
say("| store | 1 producer adds/s | 16 producers adds/s | bulk add (10,000 in one call) entries/s |")
say("|---|---:|---:|---:|")
var addFigures: [String: Double] = [:]
for (label, wakeUps) in [("PostgreSQL, NOTIFY", PostgresOfflineStore.WakeUps.notify()), ("PostgreSQL, poll-only", .pollOnly())] {
    let store = try await makeStore(schema: freshSchema("adds"), wakeUps: wakeUps)
    let queue = PersistentRequestQueue(name: "adds", store: store, session: session)
    let one = try await addsPerSecond(queue, producers: 1, each: 2_000)
    let sixteen = try await addsPerSecond(queue, producers: 16, each: 1_000)
    let bulk = try await bulkPerSecond(store, queue: "bulk", count: 10_000)
    addFigures[label + "1"] = one
    addFigures[label + "16"] = sixteen
    say("| \(label) | \(Int(one)) | \(Int(sixteen)) | \(Int(bulk)) |")
}
do {
    let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("fleet-bench-\(getpid())")
    defer { try? FileManager.default.removeItem(at: directory) }
    let store = try SQLiteOfflineStore(name: "adds", directory: directory)
    let queue = PersistentRequestQueue(name: "adds", store: store, session: session)
    let one = try await addsPerSecond(queue, producers: 1, each: 2_000)
    let sixteen = try await addsPerSecond(queue, producers: 16, each: 1_000)
    let bulk = try await bulkPerSecond(store, queue: "bulk", count: 10_000)
    say("| SQLite (FULL), same run | \(Int(one)) | \(Int(sixteen)) | \(Int(bulk)) |")
}
let ratio1 = (addFigures["PostgreSQL, NOTIFY1"] ?? 0) / max(addFigures["PostgreSQL, poll-only1"] ?? 1, 1)
let ratio16 = (addFigures["PostgreSQL, NOTIFY16"] ?? 0) / max(addFigures["PostgreSQL, poll-only16"] ?? 1, 1)
say(String(format: "\nadds/s with NOTIFY as a fraction of without: %.2f (1 producer), %.2f (16 producers)\n", ratio1, ratio16))

// MARK: - Deliveries
let server = try BrickTestServer.start()
say("## Deliveries to a loopback server (POST /post, fleet cap 16)\n")
say("| workers | entries | seconds | deliveries/s |")
say("|---:|---:|---:|---:|")
for workers in [1, 2, 4] {
    let schema = freshSchema("deliver")
    let adder = try await makeStore(schema: schema)
    let total = 4_000
    let renderer = PersistentRequestQueue(name: "hooks", store: adder, session: session)
    var drafts: [OfflineEntry.Draft] = []
    for index in 0..<total {
        drafts.append(try renderer.draft(Post(url: server.baseURL + "/post?n=\(index)"), options: .init()))
    }
    _ = try await adder.add(drafts, dedupe: .reject)
    var queues: [PersistentRequestQueue] = []
    for _ in 0..<workers {
        queues.append(PersistentRequestQueue(name: "hooks", store: try await makeStore(schema: schema), session: session, simultaneousRequestCap: 16))
    }
    let elapsed = try await clock.measure {
        queues.forEach { $0.startProcessing() }
        while try await adder.count(queue: "hooks") > 0 { try await Task.sleep(for: .milliseconds(5)) }
    }
    for queue in queues { await queue.stopProcessing(gracePeriod: .seconds(1)) }
    say("| \(workers) | \(total) | \(String(format: "%.2f", seconds(elapsed))) | \(Int(Double(total) / seconds(elapsed))) |")
}

// MARK: - Pickup latency
say("\n## Add → attempt start (one idle worker; 200 entries, 20–520 ms apart at random)\n")
say("| wake-ups | p50 ms | p99 ms |")
say("|---|---:|---:|")
for (label, wakeUps) in [("NOTIFY", PostgresOfflineStore.WakeUps.notify()), ("poll-only, every 500 ms", .pollOnly(every: .milliseconds(500)))] {
    let schema = freshSchema("pickup")
    let adder = try await makeStore(schema: schema, wakeUps: wakeUps)
    let worker = PersistentRequestQueue(name: "pickup", store: try await makeStore(schema: schema, wakeUps: wakeUps), session: session, simultaneousRequestCap: 4)
    worker.startProcessing()
    try await Task.sleep(for: .milliseconds(200))
    let renderer = PersistentRequestQueue(name: "pickup", store: adder, session: session)
    var latencies: [Duration] = []
    for index in 0..<200 {
        let path = "/anything/\(label.prefix(4))-\(index)"
        let draft = try renderer.draft(Post(url: server.baseURL + path), options: .init())
        let added = ContinuousClock.now
        _ = try await adder.add([draft], dedupe: .reject)
        while server.requests(path: path).isEmpty { try await Task.sleep(for: .milliseconds(1)) }
        latencies.append(server.requests(path: path)[0].receivedAt - added)
        // Spaced at random, so that adds do not fall at the same point of a poll's period.
        try await Task.sleep(for: .milliseconds(Int.random(in: 20...520)))
    }
    await worker.stopProcessing(gracePeriod: .seconds(1))
    say("| \(label) | \(milliseconds(percentile(latencies, 0.5))) | \(milliseconds(percentile(latencies, 0.99))) |")
}

// MARK: - Reclaim
say("\n## Reclaim after a worker dies (lease 1 s; 20 deaths)\n")
do {
    let schema = freshSchema("reclaim")
    let lease = Duration.seconds(1)
    let dead = try await makeStore(schema: schema, lease: lease)
    let survivor = PersistentRequestQueue(name: "reclaim", store: try await makeStore(schema: schema, lease: lease), session: session, simultaneousRequestCap: 4)
    let renderer = PersistentRequestQueue(name: "reclaim", store: dead, session: session)
    var times: [Duration] = []
    survivor.startProcessing()
    for index in 0..<20 {
        let path = "/anything/reclaim-\(index)"
        let draft = try renderer.draft(Post(url: server.baseURL + path), options: .init(notBefore: Date().addingTimeInterval(0.3)))
        _ = try await dead.add([draft], dedupe: .reject)
        // The dying worker takes it the moment it is due (before the survivor can), then dies;
        // a round the survivor won is not counted.
        var taken: [OfflineEntry] = []
        while taken.isEmpty && server.requests(path: path).isEmpty {
            // Claimed as if its clock read the due time: before the survivor, which waits for it.
            taken = try await dead.lease(queue: "reclaim", limit: 1, now: Date().addingTimeInterval(0.3), for: lease)
            if taken.isEmpty { try await Task.sleep(for: .milliseconds(1)) }
        }
        let died = ContinuousClock.now
        if taken.isEmpty { continue }
        while server.requests(path: path).isEmpty { try await Task.sleep(for: .milliseconds(2)) }
        times.append(server.requests(path: path)[0].receivedAt - died)
    }
    await survivor.stopProcessing(gracePeriod: .seconds(1))
    say("\(times.count) of 20 rounds had the dying worker take the entry first")
    guard !times.isEmpty else { exit(1) }
    say("| lease | p50 | p99 | p99 / lease |")
    say("|---:|---:|---:|---:|")
    let p99 = percentile(times, 0.99)
    say("| 1000 ms | \(milliseconds(percentile(times, 0.5))) ms | \(milliseconds(p99)) ms | \(String(format: "%.2f", seconds(p99) / seconds(lease))) |")
}
server.shutdown()
clients.tasks.forEach { $0.cancel() }

/// The endpoint the deliveries use.
final class Post: Component, POSTRequestType {
    let urlString: String
    init(url: String) {
        self.urlString = url
        super.init()
    }
}
