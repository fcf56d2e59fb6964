import BrickOffline
import BrickOfflinePostgres
import BrickOfflineTestSupport
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import GRDB
import Logging
import PostgresNIO
import Testing

/// `brick-queue` run as an operator runs it — the built binary, in a process of its own — against
/// real stores: a SQLite file and the private PostgreSQL the fixture starts. `--json` output is
/// parsed here; exit statuses are checked.
@Suite("brick-queue against real stores", .serialized, .timeLimit(.minutes(3)))
struct BrickQueueCommandTests {
    /// The output (stdout and stderr) and exit status of `brick-queue ARGUMENTS`.
    struct Run {
        let output: String
        let status: Int32
        var lines: [String] { output.split(separator: "\n").map(String.init) }
        /// Each output line parsed as a JSON object.
        var objects: [[String: Any]] {
            lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
    }

    /// Runs `brick-queue` (SQLite files), or `brick-queue-postgres` when the arguments name a
    /// PostgreSQL store (`tool` forces one).
    static func brickQueue(_ arguments: [String], environment: [String: String] = [:], tool: String? = nil) async throws -> Run {
        let name = tool ?? (arguments.contains("--postgres") ? "brick-queue-postgres" : "brick-queue")
        let binary = testProductsDirectory.appendingPathComponent(name).path
        let exports = environment.map { "export \($0.key)='\($0.value)'; " }.joined()
        let command = ([binary] + arguments).map { "'\($0)'" }.joined(separator: " ")
        let text = try await Subprocess.run("\(exports)\(command) 2>&1; echo \"exit=$?\"")
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        while lines.last == "" { lines.removeLast() }
        let status = Int32(lines.removeLast().dropFirst("exit=".count)) ?? -1
        return Run(output: lines.joined(separator: "\n"), status: status)
    }

    /// A fresh store in a schema of its own on the fixture's server, and the client it runs on.
    static func postgresStore() async throws -> (PostgresFixture, RunningClient, String, PostgresOfflineStore) {
        let fixture = try await PostgresFixture.server()
        let running = RunningClient(fixture.configuration())
        let schema = PostgresFixture.freshSchema()
        do {
            let store = try await PostgresOfflineStore(
                client: running.client, schema: schema, startupDeadline: PostgresFixture.startupDeadline
            )
            return (fixture, running, schema, store)
        } catch {
            running.shutdown()
            throw error
        }
    }

    /// The URL an operator would give `--postgres` for the fixture's server.
    static func url(of fixture: PostgresFixture) -> String {
        "postgres://\(fixture.user):\(fixture.password)@\(fixture.host):\(fixture.port)/\(fixture.database)?sslmode=disable"
    }

    /// A store with two pending entries (due in an hour) and one dead letter (a 500 at its only
    /// attempt) in queue `hooks`; returns the IDs of the pending entries and of the dead letter.
    static func fill(_ store: any OfflineStore, server: BrickTestServer) async throws -> (pending: [UUID], dead: UUID) {
        server.route("/fail") { _ in .status(500) }
        let queue = PersistentRequestQueue(name: "hooks", store: store, session: Session(), retryInterval: .milliseconds(50))
        let later = PersistentRequestQueue.EntryOptions(notBefore: Date().addingTimeInterval(3600))
        try await queue.add(RecordSale(server.baseURL + "/anything/a?token=secret", amount: 1), options: later)
        try await queue.add(RecordSale(server.baseURL + "/anything/b", amount: 2), options: later)
        try await queue.add(RecordSale(server.baseURL + "/fail", amount: 3), options: .init(maxAttempts: 1))
        await eventually { ((try? await queue.deadLetters()) ?? []).count == 1 }
        let dead = try #require(try await queue.deadLetters().first).id
        let pending = try await queue.entries().map(\.id)
        await queue.close(gracePeriod: .zero)
        return (pending, dead)
    }

    /// Runs `body` with a loopback server, a directory whose store `offline.sqlite` was filled by
    /// ``fill(_:server:)`` and closed (its lock released, as a stopped worker leaves it), the
    /// store's path and the IDs.
    static func withFilledSQLiteStore(
        _ body: (BrickTestServer, URL, String, (pending: [UUID], dead: UUID)) async throws -> Void
    ) async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let ids: (pending: [UUID], dead: UUID)
                do {
                    let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
                    ids = try await fill(store, server: server)
                }
                try await body(server, directory, directory.appendingPathComponent("offline.sqlite").path, ids)
            }
        }
    }

    @Test("on a SQLite file: status, list (pending and dead), show, retry a dead letter; a pending entry and a missing file are refused (1), a usage error is 2")
    func sqlite() async throws {
        try await Self.withFilledSQLiteStore { server, directory, path, ids in
            let status = try await Self.brickQueue(["--sqlite", path, "--json", "status"])
            #expect(status.status == 0, "\(status.output)")
            let summary = try #require(status.objects.first)
            #expect(summary["queue"] as? String == "hooks")
            #expect(summary["pending"] as? Int == 2)
            #expect(summary["due"] as? Int == 0, "both are due in an hour")
            #expect(summary["dead"] as? Int == 1)
            #expect(summary["leased"] as? Int == 0)

            let pending = try await Self.brickQueue(["--sqlite", path, "--json", "list", "hooks"])
            #expect(pending.objects.compactMap { $0["id"] as? String } == ids.pending.map(\.uuidString))
            // The URL as telemetry records it: no query (a token may be there).
            #expect(pending.objects.first?["url"] as? String == server.baseURL + "/anything/a")
            #expect(!pending.output.contains("secret"))
            let paged = try await Self.brickQueue(["--sqlite", path, "--json", "list", "hooks", "--limit", "1", "--after", ids.pending[0].uuidString])
            #expect(paged.objects.compactMap { $0["id"] as? String } == [ids.pending[1].uuidString])

            let dead = try await Self.brickQueue(["--sqlite", path, "--json", "list", "hooks", "--dead"])
            let letter = try #require(dead.objects.first)
            #expect(letter["id"] as? String == ids.dead.uuidString)
            #expect(letter["lastStatus"] as? Int == 500)
            #expect(letter["deadReason"] is String)

            let shown = try await Self.brickQueue(["--sqlite", path, "--json", "show", ids.dead.uuidString, "--body"])
            let entry = try #require(shown.objects.first)
            #expect(entry["method"] as? String == "POST")
            #expect(entry["bodyText"] as? String == "amount=3")
            let human = try await Self.brickQueue(["--sqlite", path, "show", ids.dead.uuidString])
            #expect(human.status == 0)
            #expect(human.output.contains("HTTP 500"), "\(human.output)")

            let pendingRetry = try await Self.brickQueue(["--sqlite", path, "retry", ids.pending[0].uuidString])
            #expect(pendingRetry.status == 1)
            #expect(pendingRetry.output.contains("is pending, not a dead letter"), "\(pendingRetry.output)")
            let retried = try await Self.brickQueue(["--sqlite", path, "retry", ids.dead.uuidString])
            #expect(retried.status == 0, "\(retried.output)")
            let after = try await Self.brickQueue(["--sqlite", path, "--json", "status"])
            #expect(after.objects.first?["dead"] as? Int == 0)
            #expect(after.objects.first?["pending"] as? Int == 3)
            #expect(after.objects.first?["due"] as? Int == 1, "the retried entry is due now")

            // A store of an older release is not migrated behind its workers' back.
            do {
                let queue = try DatabaseQueue(path: path)
                try await queue.write { db in try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v2: paused queues'") }
                try queue.close()
            }
            let older = try await Self.brickQueue(["--sqlite", path, "status"])
            #expect(older.status == 1)
            #expect(older.output.contains("older release"), "\(older.output)")

            let missing = try await Self.brickQueue(["--sqlite", directory.appendingPathComponent("none.sqlite").path, "status"])
            #expect(missing.status == 1)
            #expect(missing.output.contains("no store at"))
            let both = try await Self.brickQueue(["--sqlite", path, "--postgres", "postgres://x", "status"])
            #expect(both.status == 2, "\(both.output)")
            // Each tool reads one kind of store and names the other for the rest; brick-queue
            // alone (built without brick-queue-postgres beside it) refuses PostgreSQL.
            let alone = directory.appendingPathComponent("alone")
            try FileManager.default.createDirectory(at: alone, withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                at: testProductsDirectory.appendingPathComponent("brick-queue"), to: alone.appendingPathComponent("brick-queue")
            )
            let postgresHere = try await Subprocess.run("'\(alone.path)/brick-queue' --postgres postgres://x status 2>&1; echo \"exit=$?\"")
            #expect(postgresHere.hasSuffix("exit=1\n") || postgresHere.hasSuffix("exit=1"), "\(postgresHere)")
            #expect(postgresHere.contains("swift build --product brick-queue-postgres"), "\(postgresHere)")
            let noStore = try await Subprocess.run("'\(alone.path)/brick-queue' status 2>&1; true")
            #expect(noStore.contains("give --sqlite PATH"), "\(noStore)")
            let sqliteThere = try await Self.brickQueue(["--sqlite", path, "status"], tool: "brick-queue-postgres")
            #expect(sqliteThere.status == 1)
            #expect(sqliteThere.output.contains("read by brick-queue "), "\(sqliteThere.output)")
            let noID = try await Self.brickQueue(["--sqlite", path, "show", "not-an-id"])
            #expect(noID.status == 2)
            let narrowedIDs = try await Self.brickQueue(["--sqlite", path, "retry", ids.dead.uuidString, "--outcome", "HTTP 500"])
            #expect(narrowedIDs.status == 2, "--outcome selects among a queue's dead letters, not given IDs")
        }
    }

    @Test("on a SQLite file: dead letters grouped by host and outcome; purge --dead removes a group (by outcome and host), remove a pending entry; a second remove finds nothing (1)")
    func sqliteRemoveAndPurge() async throws {
        try await Self.withFilledSQLiteStore { server, directory, path, ids in
            let reasons = try await Self.brickQueue(["--sqlite", path, "--json", "status", "--dead-reasons"])
            let group = try #require(reasons.objects.first)
            #expect(group["queue"] as? String == "hooks")
            #expect(group["host"] as? String == server.baseURL.replacingOccurrences(of: "http://", with: ""))
            #expect(group["outcome"] as? String == "HTTP 500")
            #expect(group["count"] as? Int == 1)
            let said = try await Self.brickQueue(["--sqlite", path, "status", "--dead-reasons"])
            #expect(said.output.contains("hooks: 1 × HTTP 500 from 127.0.0.1"), "\(said.output)")
            let young = try await Self.brickQueue(["--sqlite", path, "purge", "--dead", "hooks", "--older-than", "1h"])
            #expect(young.status == 0)
            #expect(young.output.contains("0 dead letters of hooks removed"), "dead for less than an hour: kept")
            let otherGroup = try await Self.brickQueue(["--sqlite", path, "purge", "--dead", "hooks", "--outcome", "HTTP 404"])
            #expect(otherGroup.output.contains("0 dead letters of hooks removed"), "another group: kept")
            let host = server.baseURL.replacingOccurrences(of: "http://", with: "")
            let purged = try await Self.brickQueue(["--sqlite", path, "--json", "purge", "--dead", "hooks", "--outcome", "HTTP 500", "--host", host])
            #expect(purged.objects.compactMap { $0["id"] as? String } == [ids.dead.uuidString])
            let removed = try await Self.brickQueue(["--sqlite", path, "remove", ids.pending[0].uuidString])
            #expect(removed.status == 0, "\(removed.output)")
            let status = try await Self.brickQueue(["--sqlite", path, "--json", "status"])
            #expect(status.objects.first?["pending"] as? Int == 1)
            #expect(status.objects.first?["dead"] as? Int == 0)
            let again = try await Self.brickQueue(["--sqlite", path, "remove", ids.pending[0].uuidString])
            #expect(again.status == 1)
            #expect(again.output.contains("no entry"))
        }
    }

    @Test("--dry-run: retry, remove and purge say what they would change (text and JSON) and change nothing: the files are byte-identical")
    func dryRun() async throws {
        try await Self.withFilledSQLiteStore { _, directory, path, ids in
            let before = try Data(contentsOf: URL(fileURLWithPath: path))
            let retry = try await Self.brickQueue(["--sqlite", path, "retry", "--dry-run", ids.dead.uuidString])
            #expect(retry.status == 0, "\(retry.output)")
            #expect(retry.output.contains("dry run: 1 dead letter would go back to pending; nothing changed"), "\(retry.output)")
            let retryAll = try await Self.brickQueue(["--sqlite", path, "--json", "retry", "--dry-run", "--dead", "hooks", "--all"])
            #expect(retryAll.objects.compactMap { $0["id"] as? String } == [ids.dead.uuidString])
            #expect(retryAll.objects.first?["wouldRetry"] as? Bool == true)
            let pendingRetry = try await Self.brickQueue(["--sqlite", path, "retry", "--dry-run", ids.pending[0].uuidString])
            #expect(pendingRetry.status == 1, "a pending entry is refused, as without --dry-run")
            let remove = try await Self.brickQueue(["--sqlite", path, "remove", "--dry-run", ids.pending[0].uuidString, ids.dead.uuidString])
            #expect(remove.output.contains("dry run: 2 entries would be removed; nothing changed"), "\(remove.output)")
            let purge = try await Self.brickQueue(["--sqlite", path, "--json", "purge", "--dead", "hooks", "--dry-run"])
            #expect(purge.objects.compactMap { $0["id"] as? String } == [ids.dead.uuidString])
            #expect(purge.objects.first?["wouldRemove"] as? Bool == true)
            let status = try await Self.brickQueue(["--sqlite", path, "--json", "status"])
            #expect(status.objects.first?["pending"] as? Int == 2)
            #expect(status.objects.first?["dead"] as? Int == 1)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "the store file is unchanged")
            _ = directory
        }
    }

    @Test("retry --rewrite-url: one dead letter by ID and a dead-letter group go to a new URL and are delivered there, bodies and keys kept; a URL the prefix does not match is refused (by ID) or left dead (in a group); --dry-run and refusals change nothing")
    func rewriteURL() async throws {
        try await Self.withFilledSQLiteStore { server, directory, path, ids in
            server.route("/moved/fail") { _ in .status(204) }
            // Two more dead letters to the same stale path, and one elsewhere that must stay dead.
            var elsewhere: UUID
            do {
                let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
                let queue = PersistentRequestQueue(name: "hooks", store: store, session: Session(), retryInterval: .milliseconds(50))
                for amount in [10, 11] { try await queue.add(RecordSale(server.baseURL + "/fail", amount: amount), options: .init(maxAttempts: 1)) }
                server.route("/other") { _ in .status(500) }
                try await queue.add(RecordSale(server.baseURL + "/other", amount: 12), options: .init(maxAttempts: 1))
                await eventually { ((try? await queue.deadLetters()) ?? []).count == 4 }
                elsewhere = try #require(try await queue.deadLetters().first { EntryURL.path(of: $0) == "/other" }).id
                await queue.close(gracePeriod: .zero)
            }
            let rewrite = "\(server.baseURL)/fail=\(server.baseURL)/moved/fail"
            // What the store holds, read as the tool reads it (the file's bytes may still move
            // as the worker's connection winds down; the dry-run test compares bytes).
            func contents() async throws -> [OfflineEntry] {
                let store = try SQLiteOfflineStore.inspecting(atPath: path, access: .read)
                return try await store.deadLetters(queue: "hooks") + store.list(queue: "hooks")
            }
            let before = try await contents()

            let malformed = try await Self.brickQueue(["--sqlite", path, "retry", ids.dead.uuidString, "--rewrite-url", "ftp://x=y"])
            #expect(malformed.status == 2, "\(malformed.output)")
            let unmatched = try await Self.brickQueue(["--sqlite", path, "retry", elsewhere.uuidString, "--rewrite-url", rewrite])
            #expect(unmatched.status == 1)
            #expect(unmatched.output.contains("does not start with \(server.baseURL)/fail"), "\(unmatched.output)")
            let dry = try await Self.brickQueue(["--sqlite", path, "--json", "retry", "--dry-run", ids.dead.uuidString, "--rewrite-url", rewrite])
            #expect(dry.objects.first?["url"] as? String == server.baseURL + "/moved/fail", "\(dry.output)")
            #expect(dry.objects.first?["wouldRetry"] as? Bool == true)
            #expect(try await contents() == before, "a dry run and the refusals change nothing")

            // One by ID, then the rest of the group: the one elsewhere is left dead and said so.
            let one = try await Self.brickQueue(["--sqlite", path, "--json", "retry", ids.dead.uuidString, "--rewrite-url", rewrite])
            #expect(one.status == 0, "\(one.output)")
            #expect(one.objects.first?["retried"] as? Bool == true)
            let group = try await Self.brickQueue(["--sqlite", path, "retry", "--dead", "hooks", "--all", "--rewrite-url", rewrite])
            #expect(group.status == 0, "\(group.output)")
            #expect(group.output.contains("2 dead letters back to pending, due now at \(server.baseURL)/moved/fail…"), "\(group.output)")
            #expect(group.output.contains("1 dead letter of the selection left dead: its URL does not start with"), "\(group.output)")

            // Read back from code, then delivered by a worker at the new address, once each.
            let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
            let moved = try await store.list(queue: "hooks").filter { EntryURL.path(of: $0) == "/moved/fail" }
            #expect(moved.count == 3)
            let request = try #require(moved.first).queuedRequest()
            #expect(request.method == .post)
            #expect(request.url == server.baseURL + "/moved/fail")
            #expect(request.body.map { String(decoding: $0, as: UTF8.self).hasPrefix("amount=") } == true)
            let queue = PersistentRequestQueue(name: "hooks", store: store, session: Session(), retryInterval: .milliseconds(50))
            queue.startProcessing()
            await eventually { server.requests(path: "/moved/fail").count == 3 }
            let keys = server.requests(path: "/moved/fail").compactMap { $0.header("Idempotency-Key") }
            #expect(Set(keys) == Set(moved.map(\.idempotencyKey)), "each went with its own key")
            #expect(try await store.deadLetters(queue: "hooks").map(\.id) == [elsewhere])
            await queue.close(gracePeriod: .zero)
        }
    }

    @Test("an entry the egress policy refused: status --dead-reasons and show name the refusal and the address class")
    func egressRefusal() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                do {
                    var configuration = Session.Configuration()
                    configuration.transport.proxy = .none
                    configuration.egressPolicy = .publicInternetOnly
                    let session = Session(configuration: configuration, reachability: ManualReachability(), clock: ManualClock())
                    let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
                    let queue = PersistentRequestQueue(name: "hooks", store: store, session: session)
                    try await queue.add(RecordSale(server.baseURL + "/anything/hook", amount: 3))
                    await queue.waitUntilEmpty()
                    await queue.close()
                }
                let path = directory.appendingPathComponent("offline.sqlite").path
                let said = try await Self.brickQueue(["--sqlite", path, "status", "--dead-reasons"])
                #expect(said.status == 0, "\(said.output)")
                #expect(said.output.contains("hooks: 1 × error: egress refused: 127.0.0.1 → 127.0.0.1 is loopback"), "\(said.output)")
                let dead = try await Self.brickQueue(["--sqlite", path, "--json", "list", "hooks", "--dead"])
                #expect((dead.objects.first?["deadReason"] as? String)?.contains("egress refused") == true, "\(dead.output)")
                #expect(server.requests(path: "/anything/hook").isEmpty)
            }
        }
    }

    @Test("on PostgreSQL: pause stops a running worker claiming (it looks and takes nothing), status shows it, resume wakes it and it delivers")
    func pauseAndResume() async throws {
        try await withServer { server in
            let (fixture, running, schema, store) = try await Self.postgresStore()
            defer { running.shutdown() }
            let url = Self.url(of: fixture)
            let paused = try await Self.brickQueue(["--postgres", url, "--schema", schema, "pause", "hooks"])
            #expect(paused.status == 0, "\(paused.output)")

            let observed = ObservedStore(store)
            var looks = observed.pausedReads.makeAsyncIterator()
            let queue = PersistentRequestQueue(name: "hooks", store: observed, session: Session())
            try await queue.add(RecordSale(server.baseURL + "/post", amount: 1))
            #expect(await looks.next() == "hooks", "the worker looked and found the queue paused")
            #expect(server.requests(path: "/post").isEmpty)
            let status = try await Self.brickQueue(["--postgres", url, "--schema", schema, "--json", "status"])
            let summary = try #require(status.objects.first)
            #expect(summary["paused"] as? Bool == true)
            #expect(summary["due"] as? Int == 1)
            #expect(summary["leased"] as? Int == 0)

            let resumed = try await Self.brickQueue(["--postgres", url, "--schema", schema, "resume", "hooks"])
            #expect(resumed.status == 0, "\(resumed.output)")
            await queue.waitUntilEmpty()
            #expect(server.requests(path: "/post").count == 1)
            let after = try await Self.brickQueue(["--postgres", url, "--schema", schema, "--json", "status"])
            // Emptied, the queue stays in view for an hour with what it delivered (counted by the
            // statement that removed the entry, in the store's per-worker minute rows).
            let emptied = try #require(after.objects.first)
            #expect(emptied["pending"] as? Int == 0 && emptied["paused"] as? Bool == false)
            #expect(emptied["deliveredLastMinute"] as? Int == 1 && emptied["deliveredLastHour"] as? Int == 1)
            #expect(emptied["failedLastHour"] as? Int == 0)
            await queue.close()
        }
    }

    @Test("on PostgreSQL beside a running worker: an entry under its lease is neither removed nor retried; once delivered it is gone")
    func fencedBesideAWorker() async throws {
        try await withServer { server in
            let (fixture, running, schema, store) = try await Self.postgresStore()
            defer { running.shutdown() }
            let gate = ResponseGate()
            server.route("/held") { _ in .held(.ok("done"), until: gate) }
            let queue = PersistentRequestQueue(name: "hooks", store: store, session: Session())
            try await queue.add(RecordSale(server.baseURL + "/held", amount: 1))
            await eventually { server.requests(path: "/held").count == 1 }
            let id = try #require(try await store.list(queue: "hooks").first).id
            let url = Self.url(of: fixture)

            let status = try await Self.brickQueue(["--postgres", url, "--schema", schema, "--json", "status"])
            #expect(status.objects.first?["leased"] as? Int == 1)
            #expect(status.objects.first?["leasedBy"] as? [String: Int] == [store.workerName: 1])
            let shown = try await Self.brickQueue(["--postgres", url, "--schema", schema, "--json", "show", id.uuidString])
            #expect(shown.objects.first?["leasedBy"] as? String == store.workerName)
            let remove = try await Self.brickQueue(["--postgres", url, "--schema", schema, "remove", id.uuidString])
            #expect(remove.status == 1)
            #expect(remove.output.contains("under a worker's lease"), "\(remove.output)")
            let retry = try await Self.brickQueue(["--postgres", url, "--schema", schema, "retry", id.uuidString])
            #expect(retry.status == 1)
            #expect(retry.output.contains("is pending, not a dead letter"), "\(retry.output)")
            #expect(try await store.list(queue: "hooks").map(\.id) == [id], "the worker's entry is untouched")

            gate.open()
            await queue.waitUntilEmpty()
            #expect(server.requests(path: "/held").count == 1)
            let gone = try await Self.brickQueue(["--postgres", url, "--schema", schema, "remove", id.uuidString])
            #expect(gone.status == 1)
            #expect(gone.output.contains("no entry"))
            await queue.close()
        }
    }

    @Test("on PostgreSQL: status and retry --dead QUEUE --all beside the store's own client; a schema that holds no store is refused")
    func postgres() async throws {
        try await withServer { server in
            let (fixture, running, schema, store) = try await Self.postgresStore()
            defer { running.shutdown() }
            let ids = try await Self.fill(store, server: server)
            let url = Self.url(of: fixture)

            let status = try await Self.brickQueue(["--postgres", url, "--schema", schema, "--json", "status"])
            #expect(status.status == 0, "\(status.output)")
            #expect(status.objects.first?["pending"] as? Int == 2)
            #expect(status.objects.first?["dead"] as? Int == 1)
            // The password is never printed, whatever happens.
            #expect(!status.output.contains(fixture.password))

            let otherGroup = try await Self.brickQueue(["--postgres", url, "--schema", schema, "retry", "--dead", "hooks", "--all", "--outcome", "HTTP 503"])
            #expect(otherGroup.output.contains("no dead letter retried"), "\(otherGroup.output)")
            let retried = try await Self.brickQueue(["--postgres", url, "--schema", schema, "retry", "--dead", "hooks", "--all", "--outcome", "HTTP 500"])
            #expect(retried.status == 0, "\(retried.output)")
            #expect(try await store.deadLetters(queue: "hooks").isEmpty)
            #expect(try await store.list(queue: "hooks").contains { $0.id == ids.dead })
            // brick-queue, built beside brick-queue-postgres, hands a PostgreSQL store over to it.
            let handedOver = try await Self.brickQueue(["--postgres", url, "--schema", schema, "--json", "status"], tool: "brick-queue")
            #expect(handedOver.status == 0, "\(handedOver.output)")
            #expect(handedOver.objects.first?["queue"] as? String == "hooks", "\(handedOver.output)")

            // A store of an older release is not migrated behind its workers' back.
            let last = PostgresSchema.currentVersion
            try await running.client.query("DELETE FROM \(unescaped: schema).migration WHERE version = \(last)", logger: Logger(label: "test"))
            let older = try await Self.brickQueue(["--postgres", url, "--schema", schema, "status"])
            #expect(older.status == 1)
            #expect(older.output.contains("schema version \(last - 1)"), "\(older.output)")

            let elsewhere = try await Self.brickQueue(["--postgres", url, "--schema", "no_store_here", "status"])
            #expect(elsewhere.status == 1)
            #expect(elsewhere.output.contains("no offline store"), "\(elsewhere.output)")
        }
    }

    @Test("serve: refuses a non-loopback address without --token-file (2); on loopback it prints its URL, serves the overview as 127.0.0.1 only (421 for another Host), and stops on SIGTERM (0) with a live page open")
    func serve() async throws {
        try await Self.withFilledSQLiteStore { _, directory, path, _ in
            let exposed = try await Self.brickQueue(["--sqlite", path, "serve", "--host", "0.0.0.0"])
            #expect(exposed.status == 2)
            #expect(exposed.output.contains("--token-file"), "\(exposed.output)")

            let binary = testProductsDirectory.appendingPathComponent("brick-queue").path
            let log = directory.appendingPathComponent("serve.log").path
            let pid = try Subprocess.spawn("exec '\(binary)' --sqlite '\(path)' serve --port 0 > '\(log)' 2>&1")
            var port: Int?
            await eventually {
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                guard let range = text.range(of: "console at http://127.0.0.1:") else { return false }
                port = Int(text[range.upperBound...].prefix { $0.isNumber })
                return port != nil
            }
            let base = "http://127.0.0.1:\(try #require(port))"
            let transport = CurlTransport()
            let page = try await transport.send(TransportRequest(method: .get, url: base + "/"))
            #expect(page.status == .ok)
            #expect(String(decoding: page.body ?? Data(), as: UTF8.self).contains("data-count=\"hooks pending\">2<"))
            let rebound = try await transport.send(TransportRequest(method: .get, url: base + "/", headers: [(name: "Host", value: "attacker.example:\(port!)")]))
            #expect(rebound.status.code == 421)
            // A page left open (its live updates) does not hold the shutdown.
            let events = directory.appendingPathComponent("events.log").path
            let follower = try Subprocess.spawn("exec curl -sN '\(base)/events' > '\(events)'")
            defer { kill(follower, SIGKILL); _ = Subprocess.wait(follower) }
            await eventually {
                ((try? String(contentsOfFile: events, encoding: .utf8)) ?? "").contains("event: counts")
            }
            kill(pid, SIGTERM)
            let status = await Task.detached { Subprocess.wait(pid) }.value
            #expect(status == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
    }
}
