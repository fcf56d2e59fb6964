// fleet-bench: the offline queue on PostgreSQL beside SQLite, in one run.
//
//   eval "$(../Scripts/private-postgres.sh start /tmp/brick-pg)"   # or any database named by PG*
//   swift run -c release fleet-bench
//
// Prints, each against a fresh schema (and a fresh SQLite file in /tmp for the baseline):
//   - durable adds/s through PersistentRequestQueue.add with 1 and 16 producers, and a bulk add
//     (10,000 entries in one store call), with NOTIFY and poll-only (no NOTIFY), and on SQLite;
//   - deliveries/s to a loopback BrickTestServer with 1, 2 and 4 workers (each a queue with its own
//     store object and connection pool, in this process; cap 64 per worker);
//   - the floors of the same run: a raw SQL loop on the same database (lease 100 with SKIP LOCKED in
//     one transaction, delete them in the next; 1 and 4 connections) and the loopback HTTP side
//     alone (the same POSTs, 64 at a time), then the summary line outside checks read:
//     `fleet: 1 worker N/s, 4 workers M/s, raw floor F/s`;
//   - add → attempt start (the server receiving it) p50/p99, one idle worker, NOTIFY and poll-only;
//   - with `adds` as its argument: only the adds, NOTIFY and poll-only alternating, 4 rounds;
//   - with `deliveries` as its argument: only the deliveries, the floors and the summary line;
//   - reclaim time: a worker leases entries and dies (its lease is never extended); the time until
//     another worker's attempt reaches the server, p50/p99, against the lease length.
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import BrickTestServer
import Foundation
import Logging
import PostgresNIO
import Synchronization

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

/// `fleet-bench deliveries`: only the deliveries, the floors and the summary line.
let onlyDeliveries = CommandLine.arguments.dropFirst().first == "deliveries"

// MARK: - Adds
if !onlyDeliveries {
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
}

// MARK: - Deliveries
let server = try BrickTestServer.start()
/// Where deliveries go: nginx answering `204` to everything (a server that costs the 2 cores little,
/// out of this process), else the loopback BrickTestServer, which tops out near 2,600 POSTs/s here.
let sink = try HTTPSink.start() 
let deliveryBase = sink?.baseURL ?? server.baseURL
say("deliveries go to \(sink == nil ? "the in-process BrickTestServer (no nginx found)" : "nginx answering 204 (\(deliveryBase))")\n")
say("## Deliveries to a loopback server (POST /post, cap 64 per worker: the fleet's cap is 64 × workers)\n")
say("| workers | entries | seconds | deliveries/s |")
say("|---:|---:|---:|---:|")
var deliveryFigures: [Int: Double] = [:]
for workers in [1, 2, 4] {
    let schema = freshSchema("deliver")
    let adder = try await makeStore(schema: schema)
    let total = 10_000
    let renderer = PersistentRequestQueue(name: "hooks", store: adder, session: session)
    var drafts: [OfflineEntry.Draft] = []
    for index in 0..<total {
        drafts.append(try renderer.draft(Post(url: deliveryBase + "/post?n=\(index)"), options: .init()))
    }
    _ = try await adder.add(drafts, dedupe: .reject)
    var queues: [PersistentRequestQueue] = []
    for _ in 0..<workers {
        queues.append(
            PersistentRequestQueue(
                name: "hooks",
                store: try await makeStore(schema: schema),
                session: session,
                simultaneousRequestCap: 64 * workers
            )
        )
    }
    // The end is seen from the queues' own events, not by counting the table: a count every few
    // milliseconds scans the queue's index and took a fifth of the database's time from the run.
    let delivered = Mutex(0)
    let listeners = queues.map { queue in
        let events = queue.events
        return Task {
            for await event in events {
                if case .delivered = event { delivered.withLock { $0 += 1 } }
            }
        }
    }
    let elapsed = try await clock.measure {
        queues.forEach { $0.startProcessing() }
        while delivered.withLock({ $0 }) < total { try await Task.sleep(for: .milliseconds(2)) }
    }
    for queue in queues { await queue.stopProcessing(gracePeriod: .seconds(1)) }
    listeners.forEach { $0.cancel() }
    let left = try await adder.count(queue: "hooks")
    guard left == 0 else { fatalError("\(left) entries left after \(total) deliveries were reported") }
    deliveryFigures[workers] = Double(total) / seconds(elapsed)
    say("| \(workers) | \(total) | \(String(format: "%.2f", seconds(elapsed))) | \(Int(Double(total) / seconds(elapsed))) |")
}

// MARK: - Floors: what the database and the loopback HTTP side allow, in the same run
say("\n## Floors, same run\n")
say("| floor | rows or requests | seconds | per second |")
say("|---|---:|---:|---:|")
/// A raw at-least-once loop on the same database: lease 100 rows with `FOR UPDATE SKIP LOCKED` in
/// one transaction, delete them in the next; `connections` loops at once.
func rawPostgresFloor(connections: Int, rows: Int) async throws -> Double {
    let schema = freshSchema("raw")
    var configuration = configuration
    configuration.options.maximumConnections = connections + 1
    let client = PostgresClient(configuration: configuration)
    clients.tasks.append(Task { await client.run() })
    try await client.query("CREATE SCHEMA \(unescaped: schema)")
    try await client.query(
        """
        CREATE TABLE \(unescaped: schema).job (id bigserial PRIMARY KEY, queue text NOT NULL, payload bytea NOT NULL,
            not_before timestamptz NOT NULL DEFAULT now(), lease_token uuid, lease_expires_at timestamptz)
        """
    )
    try await client.query("CREATE INDEX ON \(unescaped: schema).job (queue, not_before) WHERE lease_token IS NULL")
    try await client.query(
        """
        INSERT INTO \(unescaped: schema).job (queue, payload)
        SELECT 'raw', decode(repeat('61', 600), 'hex') FROM generate_series(1, \(Int64(rows)))
        """
    )
    let elapsed = try await clock.measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<connections {
                group.addTask {
                    while true {
                        var ids: [Int64] = []
                        let token = UUID()
                        for try await id in try await client.query(
                            """
                            UPDATE \(unescaped: schema).job SET lease_token = \(token), lease_expires_at = now() + interval '10 seconds'
                            WHERE id IN (SELECT id FROM \(unescaped: schema).job
                                         WHERE queue = 'raw' AND lease_token IS NULL AND not_before <= now()
                                         ORDER BY not_before LIMIT 100 FOR UPDATE SKIP LOCKED)
                            RETURNING id
                            """
                        ).decode(Int64.self) {
                            ids.append(id)
                        }
                        if ids.isEmpty { return }
                        try await client.query("DELETE FROM \(unescaped: schema).job WHERE id = ANY(\(ids))")
                    }
                }
            }
            try await group.waitForAll()
        }
    }
    try await client.query("DROP SCHEMA \(unescaped: schema) CASCADE")
    return Double(rows) / seconds(elapsed)
}
var floors: [String: Double] = [:]
for connections in [1, 4] {
    let rows = 50_000
    let rate = try await rawPostgresFloor(connections: connections, rows: rows)
    floors["pg\(connections)"] = rate
    say("| PostgreSQL: lease 100 with SKIP LOCKED, delete them; \(connections) connection\(connections == 1 ? "" : "s") | \(rows) | \(String(format: "%.2f", Double(rows) / rate)) | \(Int(rate)) |")
}
do {
    // The loopback HTTP side alone: the same POSTs through one session, 64 at a time.
    let total = 10_000
    let next = Counter()
    let transport = CurlTransport()
    let elapsed = try await clock.measure {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    while let index = next.take(below: total) {
                        // With an Idempotency-Key, as the queue sends: a POST without one never reuses a connection.
                        let request = try TransportRequest(
                            method: .post,
                            url: deliveryBase + "/post?h=\(index)",
                            headers: [("Idempotency-Key", UUID().uuidString)]
                        )
                        _ = try await transport.send(request)
                    }
                }
            }
            try await group.waitForAll()
        }
    }
    let rate = Double(total) / seconds(elapsed)
    floors["http"] = rate
    say("| loopback HTTP: the same POSTs through one session, 64 at a time | \(total) | \(String(format: "%.2f", seconds(elapsed))) | \(Int(rate)) |")
}
do {
    let rate = try SQLiteDeliveries.rawFloor(rows: 50_000)
    floors["sqlite"] = rate
    say("| SQLite C API: lease 100 in one transaction, delete them in the next (WAL, synchronous=FULL) | 50000 | \(String(format: "%.2f", 50_000 / rate)) | \(Int(rate)) |")
    let queue = try await SQLiteDeliveries.deliveries(to: deliveryBase, total: 10_000, session: session)
    say(String(format: "\nSQLite queue, cap 64, same server: %d deliveries/s, %.2f of its raw floor", Int(queue), queue / rate))
}
say(
    "\nfleet: 1 worker \(Int(deliveryFigures[1] ?? 0))/s, 4 workers \(Int(deliveryFigures[4] ?? 0))/s, "
        + "raw floor \(Int(floors["pg1"] ?? 0))/s"
)
say(
    String(
        format: "(1 worker: %.2f of the raw PostgreSQL floor, %.2f of the loopback HTTP floor, %d/s)\n",
        (deliveryFigures[1] ?? 0) / max(floors["pg1"] ?? 1, 1),
        (deliveryFigures[1] ?? 0) / max(floors["http"] ?? 1, 1),
        Int(floors["http"] ?? 0)
    )
)

sink?.stop()
if onlyDeliveries {
    server.shutdown()
    clients.tasks.forEach { $0.cancel() }
    exit(0)
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

/// nginx on a free loopback port answering `204` to every request, from a configuration of its own
/// in a temporary directory; `nil` when there is no nginx.
final class HTTPSink: Sendable {
    let baseURL: String
    private let directory: String
    private let process: Process

    private init(baseURL: String, directory: String, process: Process) {
        self.baseURL = baseURL
        self.directory = directory
        self.process = process
    }

    static func start() throws -> HTTPSink? {
        guard let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else { return nil }
        let directory = NSTemporaryDirectory() + "fleet-bench-nginx-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory + "/tmp", withIntermediateDirectories: true)
        let port = 20_000 + Int(getpid()) % 20_000
        let configuration = """
            worker_processes 1;
            daemon off;
            pid \(directory)/nginx.pid;
            error_log \(directory)/error.log;
            events { worker_connections 4096; }
            http {
                access_log off;
                client_body_temp_path \(directory)/tmp;
                keepalive_requests 1000000;
                server { listen 127.0.0.1:\(port); location / { return 204; } }
            }
            """
        try configuration.write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: nginx)
        process.arguments = ["-c", directory + "/nginx.conf", "-p", directory]
        try process.run()
        let sink = HTTPSink(baseURL: "http://127.0.0.1:\(port)", directory: directory, process: process)
        for _ in 0..<200 {
            if (try? Data(contentsOf: URL(fileURLWithPath: directory + "/nginx.pid"))) != nil { return sink }
            usleep(10_000)
        }
        sink.stop()
        return nil
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Hands out indexes below a total, to the HTTP floor's 64 tasks.
final class Counter: Sendable {
    private let next = Mutex(0)
    func take(below total: Int) -> Int? {
        next.withLock { value in
            guard value < total else { return nil }
            defer { value += 1 }
            return value
        }
    }
}

/// The endpoint the deliveries use.
final class Post: Component, POSTRequestType {
    let urlString: String
    init(url: String) {
        self.urlString = url
        super.init()
    }
}
