import BrickCurl
import BrickOffline
import BrickOfflineTestSupport
import BrickQueueConsole
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import Testing

/// The console as an operator sees it: served by Hummingbird over a real SQLite store whose queue a
/// worker delivers to the loopback test server, driven by Debian's chromium through Python's
/// selenium (`Browser/console-browser.py`), which saves the screenshots the docs show.
@Suite("The queue console in a real browser", .serialized, .timeLimit(.minutes(4)))
struct QueueConsoleBrowserTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Serves `consoles` on loopback ports of their own while `body` runs; `body` gets their base URLs.
    static func serving<T>(_ consoles: [(QueueConsole?) -> QueueConsole], _ body: ([String]) async throws -> T) async throws -> T {
        var logger = Logger(label: "console-test")
        logger.logLevel = .warning
        let (ports, continuation) = AsyncStream.makeStream(of: (Int, Int).self)
        var applications: [any Service] = []
        for (index, make) in consoles.enumerated() {
            let router = Router()
            router.addRoutes(make(nil).routes())
            applications.append(
                Application(
                    router: router,
                    configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                    onServerRunning: { channel in continuation.yield((index, channel.localAddress?.port ?? 0)) },
                    logger: logger
                )
            )
        }
        let group = ServiceGroup(configuration: .init(services: applications, gracefulShutdownSignals: [], logger: logger))
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var found: [Int: Int] = [:]
            for await (index, port) in ports {
                found[index] = port
                if found.count == consoles.count { break }
            }
            // The stream ends early when an application failed to start: an error, not a trap
            // that ends the whole test run.
            guard found.count == consoles.count else {
                await group.triggerGracefulShutdown()
                throw POSIXError(.EADDRNOTAVAIL)
            }
            let urls = consoles.indices.map { "http://127.0.0.1:\(found[$0] ?? 0)" }
            do {
                let result = try await body(urls)
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
                return result
            } catch {
                await group.triggerGracefulShutdown()
                tasks.cancelAll()
                throw error
            }
        }
    }

    @Test("overview, live counts as a worker delivers, a dead letter's page with a stored <script> as text, retry delivered; 401 without the token, 403 without the CSRF token; a 10,000-entry queue paged")
    func inABrowser() async throws {
        try await withServer { server in
            server.script("/flaky", [.status(500)])
            server.route("/flaky") { _ in .status(200) }
            server.route("/new/hook") { _ in .status(204) }
            // Slow enough (0.6 s each) that the browser sees the count fall, not only its end.
            server.route("/deliver") { _ in .slowDrip(totalBytes: 4, interval: .milliseconds(150)) }
            try await withDirectory { directory in
                let store = try await SQLiteOfflineStore.open(name: "offline", directory: directory)
                let session = Session()
                let alerts = PersistentRequestQueue(name: "alerts", store: store, session: session, retryInterval: .milliseconds(50))
                let hooks = PersistentRequestQueue(name: "hooks", store: store, session: session, retryInterval: .milliseconds(50))
                defer {
                    Task {
                        await alerts.close(gracePeriod: .zero)
                        await hooks.close(gracePeriod: .zero)
                    }
                }
                let planted = "<script>document.title='pwned'</script>"
                try await alerts.add(RecordSale(server.baseURL + "/flaky", amount: 1, headers: ["X-Note": planted]), options: .init(maxAttempts: 1))
                await eventually { ((try? await alerts.deadLetters()) ?? []).count == 1 }
                // A URL may hold `<` and `>` in its path (only spaces, controls and non-ASCII are
                // refused): a second dead letter, to a port nobody listens on, carries one.
                let hostile = "http://127.0.0.1:\(closedPort())/<script>document.title='pwned2'</script>"
                try await alerts.add(RecordSale(hostile, amount: 2), options: .init(maxAttempts: 1))
                await eventually { ((try? await alerts.deadLetters()) ?? []).count == 2 }
                // A partner moved: three dead letters to its old address (a port nobody listens
                // on), and one more of the same group whose URL the rewrite does not match.
                let partner = PersistentRequestQueue(name: "partner", store: store, session: session, retryInterval: .milliseconds(50))
                defer { Task { await partner.close(gracePeriod: .zero) } }
                let stale = "http://127.0.0.1:\(closedPort())"
                for number in 1...3 {
                    try await partner.add(RecordSale(stale + "/old/hook", amount: number), options: .init(maxAttempts: 1))
                }
                try await partner.add(RecordSale(stale + "/elsewhere", amount: 4), options: .init(maxAttempts: 1))
                await eventually { ((try? await partner.deadLetters()) ?? []).count == 4 }
                let untouched = try #require(try await partner.deadLetters().first { EntryURL.path(of: $0) == "/elsewhere" })
                try await store.setPaused(true, queue: "hooks")
                for number in 0..<20 { try await hooks.add(RecordSale(server.baseURL + "/deliver", amount: number)) }
                // Paging: 10,000 entries in a paused queue.
                try await store.setPaused(true, queue: "bulk")
                let bulk = PersistentRequestQueue(name: "bulk", store: store, session: session)
                for number in 0..<10_000 { try await bulk.add(RecordSale(server.baseURL + "/deliver", amount: number)) }

                // Names that need percent-encoding in a path: one pending entry each, no worker.
                let oddNames = ["café", "ops/eu west?x=1#f", "q'<b>"]
                for name in oddNames {
                    let odd = PersistentRequestQueue(name: name, store: store, session: session)
                    try await odd.add(RecordSale(server.baseURL + "/deliver", amount: 1), options: .init(notBefore: Date().addingTimeInterval(3600)))
                    await odd.close(gracePeriod: .zero)
                }
                let token = "test-token-" + UUID().uuidString
                try await Self.serving([
                    { _ in QueueConsole(store: store) },
                    { _ in QueueConsole(store: store, token: token) },
                ]) { urls in
                    // A page of the 10,000: measured (the figure goes to the notes), never asserted.
                    let transport = CurlTransport()
                    var timings: [String] = []
                    let last = try await store.page(queue: "bulk", dead: false, after: nil, limit: 9_950).last!.id
                    for path in ["/queues/bulk", "/queues/bulk?after=\(last.uuidString)"] {
                        let started = ContinuousClock.now
                        let response = try await transport.send(TransportRequest(method: .get, url: urls[0] + path))
                        timings.append("\(path.prefix(20)): \(ContinuousClock.now - started)")
                        #expect(response.status == .ok)
                        let page = String(decoding: response.body ?? Data(), as: UTF8.self)
                        #expect(page.components(separatedBy: "<tr><td class=\"mono\">").count - 1 == 50, "\(path)")
                    }
                    print("console: a page of a 10,000-entry queue:", timings.joined(separator: "; "))
                    let shots = Self.packageRoot.appendingPathComponent(".build/console-screenshots").path
                    let script = Self.packageRoot.appendingPathComponent("Tests/BrickQueueTests/Browser/console-browser.py").path
                    let output = try await Subprocess.run(
                        "python3 '\(script)' '\(urls[0])' '\(urls[1])' '\(token)' '\(shots)' '\(stale)/old' '\(server.baseURL)/new' 2>&1"
                    )
                    print(output)
                    #expect(output.contains("{\"ok\": true}"), "\(output)")
                    #expect(FileManager.default.fileExists(atPath: shots + "/console-overview.png"))
                }
                // Paused as themselves: no queue named by its encoded form was made.
                let summaries = try await QueueSummary.all(in: store, now: Date())
                #expect(Set(summaries.filter { $0.pausedSince != nil }.map(\.queue)) == Set(oddNames + ["bulk"]))
                #expect(!summaries.contains { $0.queue.contains("%") }, "\(summaries.map(\.queue))")
                // The worker delivered what the browser resumed and retried.
                #expect(server.requests(path: "/flaky").count == 2)
                // The moved group: delivered at the new URL, each once, with its own body; the
                // letter the rewrite did not match is still dead, byte for byte as it was.
                await eventually { server.requests(path: "/new/hook").count == 3 }
                #expect(Set(server.requests(path: "/new/hook").map { String(decoding: $0.body, as: UTF8.self) }).count == 3)
                let stillDead = try await store.deadLetters(queue: "partner")
                #expect(stillDead == [untouched], "\(stillDead) vs \(untouched)")
                #expect(try await store.list(queue: "partner").isEmpty)
                #expect(try await store.list(queue: "hooks").isEmpty)
                #expect(try await store.deadLetters(queue: "alerts").map { EntryURL.path(of: $0) } == ["/<script>document.title='pwned2'</script>"])
                let minutes = try await store.deliveries(since: Date().addingTimeInterval(-3600))
                #expect(minutes.filter { $0.queue == "hooks" }.reduce(0) { $0 + $1.delivered } == 20)
                #expect(minutes.filter { $0.queue == "alerts" }.reduce(0) { $0 + $1.failed } == 2)
                await bulk.close(gracePeriod: .zero)
            }
        }
    }
}

/// The path of a queued request's URL, read back from the entry.
enum EntryURL {
    static func path(of entry: OfflineEntry) -> String? {
        guard let stored = try? StoredRequest.decoded(entry.payload), let start = stored.url.range(of: "://") else { return nil }
        let rest = stored.url[start.upperBound...]
        return rest.firstIndex(of: "/").map { String(rest[$0...]) }
    }
}
