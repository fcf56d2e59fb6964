import BrickOfflineTestSupport
import BrickLifecycle
import BrickOffline
import BrickOfflineMetrics
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Logging
import MetricsTestKit
import ServiceLifecycle
import Testing

/// Graceful shutdown under swift-service-lifecycle, with requests in flight. The server holds the
/// requests until the test opens a gate, once the stop has begun (the loop takes nothing new): the
/// two in flight are still there when shutdown begins however loaded the machine is. (Held 5 s by
/// the server before, a loaded CI run once took longer than that between seeing them arrive and
/// triggering shutdown: the queue rightly took two more.)
@Suite("Lifecycle: the manager and the queue as Services, shut down with work in flight", .timeLimit(.minutes(2)))
struct LifecycleServiceTests {
    @Test("ResponseCacheService: at graceful shutdown the SQLite cache is flushed; another cache object (another process) then reads what was stored last")
    func responseCacheFlushedAtShutdown() async throws {
        try await withDirectory { directory in
            let cache = try SQLiteResponseCache(name: "api", directory: directory)
            let group = ServiceGroup(services: [ResponseCacheService(cache)], logger: Logger(label: "test"))
            let running = Task { try await group.run() }
            let urls = (0..<50).map { "https://api.example.com/items/\($0)" }
            for url in urls {
                try cache.store(
                    CachedResponse(
                        key: CacheKey(method: "GET", url: url),
                        variant: "",
                        status: 200,
                        headerFields: [.cacheControl: "max-age=600"],
                        body: Data(url.utf8),
                        url: url,
                        requestTime: Date(),
                        responseTime: Date()
                    )
                )
            }
            await group.triggerGracefulShutdown()
            try await running.value
            let reader = try SQLiteResponseCache(name: "api", directory: directory)
            for url in urls {
                #expect(try reader.cachedResponses(for: CacheKey(method: "GET", url: url)).first?.body == Data(url.utf8), "\(url)")
            }
        }
    }

    @Test("manager: shutdown lets the attempts under way finish, takes nothing new, loses nothing", arguments: StoreKind.allCases)
    func manager(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let gate = ResponseGate()
                server.route("/held") { _ in .held(.ok("done"), until: gate) }
                let url = server.baseURL + "/held"
                let store = try await place.open("svc")
                let manager = OfflineRequestManager(name: "svc", store: store, session: session())
                manager.simultaneousRequestCap = 2
                for amount in 1...4 { try await manager.queueRequest(RecordSale(url, amount: amount)) }
                let group = ServiceGroup(
                    services: [OfflineRequestManagerService(manager, gracePeriod: .seconds(30))],
                    logger: Logger(label: "test")
                )
                let running = Task { try await group.run() }
                await eventually { server.requests(path: "/held").count == 2 }
                await group.triggerGracefulShutdown()
                await eventually { !manager.isTakingRequests }
                gate.open()
                try await running.childValue
                // The two in flight finished and were stored as finished; nothing new was taken.
                #expect(server.requests(path: "/held").count == 2)
                #expect(await manager.totalRequestCount == 2)
                // The next manager on the store delivers the rest.
                let next = OfflineRequestManager(name: "svc", store: store, session: session())
                next.attemptSubmission()
                await next.waitUntilEmpty()
                next.close()
                let amounts = server.requests(path: "/held").map { String(decoding: $0.body, as: UTF8.self) }
                #expect(amounts.sorted() == (1...4).map { "amount=\($0)" })
            }
        }
    }

    @Test("manager: a grace period that ends with an attempt still running cancels it and hands its request back: stored, unleased, no attempt counted")
    func managerDeadline() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let store = try SQLiteOfflineStore(name: "deadline", directory: directory)
                let manager = OfflineRequestManager(name: "deadline", store: store, session: session())
                // Never answered: still running when the grace period ends, however loaded the machine.
                server.route("/stalled") { _ in .stall }
                try await manager.queueRequest(RecordSale(server.baseURL + "/stalled", amount: 1))
                await eventually { server.requests(path: "/stalled").count == 1 }
                await manager.stop(gracePeriod: .milliseconds(100))
                // Returned at the deadline, before the attempt ended: its request is still
                // stored (an attempt that ended would have removed it), handed back: no lease held
                // (the store's lease lasts 300 s), no attempt counted.
                let entries = try await store.list(queue: "deadline")
                let entry = try #require(entries.first)
                #expect(entries.count == 1)
                #expect(entry.lease == nil)
                #expect(entry.attempts == 0)
                // With no grace at all (a cancelled service), too.
                await manager.stop(gracePeriod: .zero)
                // The next manager on the store takes it at once.
                let next = OfflineRequestManager(name: "deadline", store: store, session: session())
                next.attemptSubmission()
                await eventually { server.requests(path: "/stalled").count == 2 }
                next.close()
            }
        }
    }

    @Test("queue: a grace period that ends with an attempt still running cancels it and hands its entry back: stored, unleased, no attempt counted")
    func queueDeadline() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let store = try SQLiteOfflineStore(name: "deadline", directory: directory)
                let queue = PersistentRequestQueue(name: "deadline", store: store, session: session())
                server.route("/stalled") { _ in .stall }
                try await queue.add(RecordSale(server.baseURL + "/stalled", amount: 1))
                await eventually { server.requests(path: "/stalled").count == 1 }
                await queue.stopProcessing(gracePeriod: .milliseconds(100))
                // Before this was tested, the hand-back ran in the cancelled attempt's task, the
                // store refused it (CancellationError), and the entry stayed leased for 300 s.
                let entries = try await store.list(queue: "deadline")
                let entry = try #require(entries.first)
                #expect(entries.count == 1)
                #expect(entry.lease == nil)
                #expect(entry.attempts == 0)
                // The next queue on the store takes it at once.
                await queue.close(gracePeriod: .zero)
                let next = PersistentRequestQueue(name: "deadline", store: store, session: session())
                next.startProcessing()
                await eventually { server.requests(path: "/stalled").count == 2 }
                await next.close(gracePeriod: .zero)
            }
        }
    }

    @Test("queue: shutdown lets the attempts under way finish, takes nothing new, loses nothing", arguments: StoreKind.allCases)
    func queue(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let gate = ResponseGate()
                server.route("/held") { _ in .held(.ok("done"), until: gate) }
                let url = server.baseURL + "/held"
                let store = try await place.open("svc")
                let queue = PersistentRequestQueue(
                    name: "svc",
                    store: store,
                    session: session(),
                    simultaneousRequestCap: 2
                )
                for amount in 1...4 { try await queue.add(RecordSale(url, amount: amount)) }
                let group = ServiceGroup(
                    // The metrics recorder beside it ends at graceful shutdown too.
                    services: [
                        OfflineQueueService(queue, gracePeriod: .seconds(30)),
                        OfflineQueueMetrics(queue, factory: TestMetrics()),
                    ],
                    logger: Logger(label: "test")
                )
                let running = Task { try await group.run() }
                await eventually { server.requests(path: "/held").count == 2 }
                await group.triggerGracefulShutdown()
                await eventually { !queue.isTakingEntries }
                gate.open()
                try await running.childValue
                #expect(server.requests(path: "/held").count == 2)
                #expect(await queue.count == 2)
                let next = PersistentRequestQueue(name: "svc", store: store, session: session())
                next.startProcessing()
                await next.waitUntilEmpty()
                await next.close()
                let amounts = server.requests(path: "/held").map { String(decoding: $0.body, as: UTF8.self) }
                #expect(amounts.sorted() == (1...4).map { "amount=\($0)" })
            }
        }
    }
}
