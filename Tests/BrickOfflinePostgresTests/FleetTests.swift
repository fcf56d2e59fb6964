import BrickOfflineTestSupport
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// A worker of the fleet: `brick-fleet-probe` draining a queue of a `PostgresOfflineStore` in a
/// process of its own, killed, stopped and continued with real signals.
final class FleetWorker: Sendable {
    let pid: pid_t
    let output: String

    static var path: String {
        testProductsDirectory.appendingPathComponent("brick-fleet-probe").path
    }

    init(
        schema: String,
        queue: String,
        cap: Int,
        leaseMilliseconds: Int,
        pollOnly: Bool = false,
        server: PostgresFixture? = nil
    ) throws {
        // Inside withFleetStore, which started the shared server if it was not running yet.
        let server = try server ?? PostgresFixture.running()
        output = NSTemporaryDirectory() + "brick-fleet-worker-" + UUID().uuidString + ".log"
        let environment = server.environment.map { "\($0.key)='\($0.value)'" }.sorted().joined(separator: " ")
        pid = try Subprocess.spawn(
            "exec env \(environment) '\(Self.path)' \(schema) \(queue) \(cap) \(leaseMilliseconds) \(pollOnly ? "poll" : "notify") >'\(output)' 2>&1"
        )
    }

    deinit {
        Glibc.kill(pid, SIGKILL)
        try? FileManager.default.removeItem(atPath: output)
    }

    /// What it printed so far, line by line.
    var lines: [String] {
        ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Waits until it printed `ready`.
    func ready() async {
        await eventually { self.lines.contains("ready") }
    }

    func signal(_ number: Int32) {
        Glibc.kill(pid, number)
    }

    /// Kills it with SIGKILL and reaps it.
    func kill() async {
        signal(SIGKILL)
        _ = await exit()
    }

    /// Waits for it to end (on a thread of its own) and returns its exit status.
    func exit() async -> Int32 {
        await Subprocess.exitStatus(of: pid)
    }
}

/// A queue's entries written straight into the store (as another process would add them), so the
/// test process itself never processes.
func addEntries(
    _ count: Int,
    to store: PostgresOfflineStore,
    queue name: String,
    url: (Int) -> String,
    options: PersistentRequestQueue.EntryOptions = .init(),
    endpoint: ((String, Int) -> any RequestType)? = nil
) async throws -> [OfflineEntry.ID] {
    let renderer = PersistentRequestQueue(name: name, store: store, session: Session())
    var drafts: [OfflineEntry.Draft] = []
    for index in 0..<count {
        let request = endpoint?(url(index), index) ?? RecordSale(url(index), amount: index)
        drafts.append(try renderer.draft(request, options: options))
    }
    var ids: [OfflineEntry.ID] = []
    for start in stride(from: 0, to: drafts.count, by: 1000) {
        ids += try await store.add(Array(drafts[start..<min(start + 1000, drafts.count)]), dedupe: .reject)
    }
    return ids
}

/// `server`, or the shared private server.
func fixture(_ server: PostgresFixture?) async throws -> PostgresFixture {
    if let server { return server }
    return try await PostgresFixture.server()
}

/// A store on a fresh schema of the private server (or of `server`), for the test process.
func withFleetStore<T>(
    server: PostgresFixture? = nil,
    _ body: (PostgresOfflineStore, RunningClient) async throws -> T
) async throws -> T {
    let client = RunningClient(try await fixture(server).configuration())
    defer { client.shutdown() }
    let store = try await PostgresOfflineStore(
        client: client.client,
        schema: PostgresFixture.freshSchema(),
        startupDeadline: PostgresFixture.startupDeadline
    )
    return try await body(store, client)
}

/// Waits until `queue` of `store` holds no pending entry (up to `limit` of real time).
func drained(_ store: PostgresOfflineStore, queue: String, within limit: Duration = .seconds(120)) async throws -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if (try? await store.count(queue: queue)) == 0 { return true }
        try await Task.sleep(for: .milliseconds(50))
    }
    return false
}

@Suite("A fleet of workers on PostgreSQL: real processes, real signals", .serialized, .timeLimit(.minutes(5)))
struct FleetTests {
    @Test("4 workers drain 10,000 entries while workers are SIGKILLed 20 times: none lost, duplicates bounded and all carry the same idempotency key")
    func crashLoop() async throws {
        try await withServer { server in
            try await withFleetStore { store, _ in
                let cap = 64
                let total = 10_000
                _ = try await addEntries(total, to: store, queue: "hooks", url: { server.baseURL + "/post?n=\($0)" })
                func start() throws -> FleetWorker {
                    try FleetWorker(schema: store.schema, queue: "hooks", cap: cap, leaseMilliseconds: 2000)
                }
                var workers = try (0..<4).map { _ in try start() }
                for worker in workers { await worker.ready() }
                var kills = 0
                while kills < 20 {
                    try await Task.sleep(for: .milliseconds(Int.random(in: 100...400)))
                    let victim = Int.random(in: 0..<workers.count)
                    await workers[victim].kill()
                    kills += 1
                    workers[victim] = try start()
                }
                #expect(try await drained(store, queue: "hooks"))
                let posts = server.requests(path: "/post")
                let keys = posts.compactMap { $0.header("Idempotency-Key") }
                let byEntry = Dictionary(grouping: posts, by: { $0.uri })
                // Nothing lost: every entry reached the server.
                #expect(byEntry.count == total)
                // Each entry's replays carry one key: after de-duplication by key, one delivery each.
                #expect(Set(keys).count == total)
                #expect(byEntry.values.allSatisfy { Set($0.map { $0.header("Idempotency-Key") }).count == 1 })
                let duplicates = posts.count - total
                #expect(duplicates <= kills * cap)
                #expect(try await store.deadLetters(queue: "hooks").isEmpty)
                print("fleet crash loop: \(total) entries, \(kills) kills, \(duplicates) duplicate deliveries")
            }
        }
    }

    /// A worker stopped past its lease while its request runs; another takes the entry, and while
    /// that one's request is still running (held by the server) the first is continued and tries
    /// to complete (its answer was a 200), reschedule (a 503) or bury (the same, with one attempt
    /// allowed). None of its writes may apply: the entry stays with the new holder, which delivers
    /// it and never finds its lease lost.
    ///
    /// Both answers are held by gates the test opens, not timed: the stale worker's once it runs
    /// again, the holder's once the stale one has failed and the entry was checked. The stale
    /// worker's lease is short (its entry must lapse while it is stopped), the holder's long (a
    /// loaded machine must not make it miss a renewal).
    func fencing(outcome: String) async throws {
        try await withServer { server in
            try await withFleetStore { store, _ in
                let stale = try FleetWorker(schema: store.schema, queue: "fence", cap: 1, leaseMilliseconds: 1000)
                await stale.ready()
                let path = "/anything/fence"
                let (staleAnswer, holderAnswer) = (ResponseGate(), ResponseGate())
                server.script(path, [
                    .held(outcome == "complete" ? .ok("stale") : .respond(status: 503), until: staleAnswer),
                    .held(.ok("holder"), until: holderAnswer),
                ])
                let options = PersistentRequestQueue.EntryOptions(maxAttempts: outcome == "bury" ? 1 : nil)
                let ids = try await addEntries(1, to: store, queue: "fence", url: { _ in server.baseURL + path }, options: options) {
                    url, _ in LimitedPost(url, timeout: .seconds(60))
                }
                await eventually { server.requests(path: path).count == 1 }
                stale.signal(SIGSTOP)
                // Past the stale worker's lease, another worker takes the entry and sends it.
                let holder = try FleetWorker(schema: store.schema, queue: "fence", cap: 1, leaseMilliseconds: 10_000)
                await holder.ready()
                await eventually { server.requests(path: path).count == 2 }
                let held = try #require(try await store.list(queue: "fence").first?.lease?.token)
                stale.signal(SIGCONT)
                staleAnswer.open()
                // The stale worker ends its attempt and learns its lease is gone.
                await eventually { stale.lines.contains { $0.hasPrefix("storeFailed") && $0.contains("lease") } }
                // While the holder's request still runs, the entry is untouched: same lease, no
                // attempt counted, not set aside.
                let entry = try #require(try await store.list(queue: "fence").first)
                #expect(entry.lease?.token == held)
                #expect(entry.attempts == 0)
                #expect(try await store.deadLetters(queue: "fence").isEmpty)
                // The holder delivers it, and its own writes all held.
                holderAnswer.open()
                #expect(try await drained(store, queue: "fence"))
                await eventually { holder.lines.contains("delivered \(ids[0]) 200") }
                #expect(!holder.lines.contains { $0.hasPrefix("storeFailed") })
                #expect(try await store.deadLetters(queue: "fence").isEmpty)
                #expect(server.requests(path: path).count == 2)
                await holder.kill()
                await stale.kill()
            }
        }
    }

    @Test("fencing: a worker stopped past its lease cannot complete what another delivered")
    func fencedComplete() async throws { try await fencing(outcome: "complete") }

    @Test("fencing: a worker stopped past its lease cannot reschedule what another delivered")
    func fencedReschedule() async throws { try await fencing(outcome: "reschedule") }

    @Test("fencing: a worker stopped past its lease cannot bury what another delivered")
    func fencedBury() async throws { try await fencing(outcome: "bury") }

    @Test("an attempt lasting 5 lease lengths is delivered once and never taken over")
    func longAttempt() async throws {
        try await withServer { server in
            try await withFleetStore { store, _ in
                // 2 s leases, renewed every third: a renewal must be 1.3 s late for the lease to
                // lapse (with 1 s leases, a loaded CI machine once made it 0.7 s late).
                let workers = try (0..<2).map { _ in
                    try FleetWorker(schema: store.schema, queue: "long", cap: 4, leaseMilliseconds: 2000)
                }
                for worker in workers { await worker.ready() }
                _ = try await addEntries(1, to: store, queue: "long", url: { _ in server.baseURL + "/delay/10" })
                #expect(try await drained(store, queue: "long"))
                #expect(server.requests(path: "/delay/10").count == 1)
                // The store is drained before the worker prints its event: wait for the line.
                await eventually { workers.flatMap(\.lines).contains { $0.hasPrefix("delivered") } }
                let lines = workers.flatMap(\.lines)
                #expect(lines.filter { $0.hasPrefix("delivered") }.count == 1)
                #expect(!lines.contains { $0.hasPrefix("storeFailed") })
            }
        }
    }

    @Test("cap 1 across 4 workers: the server never sees two at once, and sees them in order")
    func fleetWideCap() async throws {
        try await withServer { server in
            try await withFleetStore { store, _ in
                let workers = try (0..<4).map { _ in
                    try FleetWorker(schema: store.schema, queue: "serial", cap: 1, leaseMilliseconds: 5000)
                }
                for worker in workers { await worker.ready() }
                _ = try await addEntries(200, to: store, queue: "serial", url: { server.baseURL + "/delay/0.02?n=\($0)" })
                #expect(try await drained(store, queue: "serial"))
                let requests = server.requests(path: "/delay/0.02")
                #expect(requests.count == 200)
                #expect(requests.map { $0.uri } == (0..<200).map { "/delay/0.02?n=\($0)" })
                // Each answer takes 20 ms: a request that came less than 20 ms after the one
                // before it overlapped it.
                let gaps = zip(requests.dropFirst(), requests).map { $0.receivedAt - $1.receivedAt }
                #expect(gaps.allSatisfy { $0 >= .milliseconds(20) }, "shortest gap \(gaps.min() ?? .zero)")
                // More than one worker took part.
                #expect(workers.filter { $0.lines.contains { $0.hasPrefix("delivered") } }.count > 1)
            }
        }
    }

    @Test("poll-only (for PgBouncer in transaction mode): a worker that never listens picks up what another process adds")
    func pollOnly() async throws {
        try await withServer { server in
            try await withFleetStore { store, _ in
                let worker = try FleetWorker(schema: store.schema, queue: "polled", cap: 4, leaseMilliseconds: 2000, pollOnly: true)
                await worker.ready()
                // Added once the worker sleeps with nothing due: only its poll can find them.
                _ = try await addEntries(10, to: store, queue: "polled", url: { server.baseURL + "/post?n=\($0)" })
                #expect(try await drained(store, queue: "polled"))
                #expect(server.requests(path: "/post").count == 10)
            }
        }
    }

    @Test("the outbox: an entry added in a rolled-back transaction never exists; a committed one is delivered")
    func outbox() async throws {
        try await withServer { server in
            try await withFleetStore { store, client in
                let logger = Logger(label: "outbox-test")
                try await client.client.query(
                    "CREATE TABLE \(unescaped: store.schema).orders (id bigint PRIMARY KEY)",
                    logger: logger
                )
                let queue = PersistentRequestQueue(name: "outbox", store: store, session: Session())
                struct Rollback: Error {}
                do {
                    try await client.client.withTransaction(logger: logger) { connection in
                        try await connection.query("INSERT INTO \(unescaped: store.schema).orders (id) VALUES (1)", logger: logger)
                        try await queue.add(RecordSale(server.baseURL + "/post?order=1", amount: 1), in: connection)
                        throw Rollback()
                    }
                    Issue.record("the transaction was not rolled back")
                } catch {}
                #expect(try await store.count(queue: "outbox") == 0)
                try await client.client.withTransaction(logger: logger) { connection in
                    try await connection.query("INSERT INTO \(unescaped: store.schema).orders (id) VALUES (2)", logger: logger)
                    try await queue.add(RecordSale(server.baseURL + "/post?order=2", amount: 2), in: connection)
                }
                #expect(try await store.count(queue: "outbox") == 1)
                queue.startProcessing()
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/post").map(\.uri) == ["/post?order=2"])
                // On a queue whose store is not PostgreSQL, it says so.
                try await withDirectory { directory in
                    let local = try PersistentRequestQueue(name: "local", directory: directory, session: Session())
                    try await client.client.withConnection { connection in
                        do {
                            try await local.add(RecordSale(server.baseURL + "/post", amount: 3), in: connection)
                            Issue.record("a SQLite queue accepted an outbox add")
                        } catch {
                            let error = error as? BrickError
                            #expect(error?.code == .invalidRequest)
                            #expect(error?.message.contains("PostgresOfflineStore") == true)
                        }
                    }
                }
            }
        }
    }

    @Test("the database restarts mid-run: workers reconnect on their own and nothing is lost")
    func databaseRestart() async throws {
        // A server of its own: restarting the shared one would cut the tests running beside this one.
        let database = try await PostgresFixture.startPrivate()
        defer { database.stop() }
        try await withServer { server in
            try await withFleetStore(server: database) { store, _ in
                let workers = try (0..<2).map { _ in
                    try FleetWorker(schema: store.schema, queue: "restart", cap: 8, leaseMilliseconds: 2000, server: database)
                }
                for worker in workers { await worker.ready() }
                _ = try await addEntries(1000, to: store, queue: "restart", url: { server.baseURL + "/delay/0.01?n=\($0)" })
                await eventually { server.requests(path: "/delay/0.01").count >= 100 }
                try await database.restart()
                let done = try await drained(store, queue: "restart")
                #expect(done)
                if !done {
                    let left = try? await store.list(queue: "restart")
                    Issue.record("left: \(left?.count ?? -1), leased: \(left?.filter { $0.lease != nil }.count ?? -1); workers said: \(workers.map { $0.lines.suffix(3) })")
                }
                #expect(Set(server.requests(path: "/delay/0.01").map(\.uri)).count == 1000)
            }
        }
    }

    @Test("SIGTERM: a worker stops claiming, finishes what it has, and exits; the rest is left for others")
    func gracefulShutdown() async throws {
        try await withServer { server in
            try await withFleetStore { store, _ in
                let worker = try FleetWorker(schema: store.schema, queue: "graceful", cap: 2, leaseMilliseconds: 2000)
                await worker.ready()
                _ = try await addEntries(20, to: store, queue: "graceful", url: { server.baseURL + "/delay/0.5?n=\($0)" })
                await eventually { server.requests(path: "/delay/0.5").count >= 2 }
                worker.signal(SIGTERM)
                #expect(await worker.exit() == 0)
                #expect(worker.lines.contains("stopped"))
                // What it had started was finished, not left leased: nothing of the queue is leased.
                let pending = try await store.list(queue: "graceful")
                #expect(pending.allSatisfy { $0.lease == nil })
                // Every attempt it started ran to its end within the grace period and was recorded:
                // what reached the server is gone from the store, the rest is pending. (Its printed
                // events are not counted: the process may exit before printing the last one.)
                #expect(pending.count == 20 - server.requests(path: "/delay/0.5").count)
            }
        }
    }
}
