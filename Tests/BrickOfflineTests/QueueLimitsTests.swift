import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Synchronization
import Testing

/// A queued request keeps the limits its endpoint declared, and a delivery needs only a status.
// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("The offline queue and an endpoint's own limits, on SQLite and on PostgreSQL", .timeLimit(.minutes(3)))
struct QueueLimitsTests {
    @Test("a 2xx whose body exceeds the endpoint's limit is a delivery: sent once, removed", arguments: StoreKind.allCases)
    func largeAcceptedResponseIsADelivery(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(name: "large", store: try await place.open("large"), session: session(), retryInterval: .milliseconds(50))
                server.script("/accepted", [.respond(status: 201, body: Array(repeating: 65, count: 64 * 1024))])
                let delivered = Lock<TransportResponse?>(nil)
                try await queue.add(LimitedPost(server.baseURL + "/accepted", maxResponseSize: 1024)) { result in
                    delivered.withLock { $0 = try? result.get() }
                }
                await queue.waitUntilEmpty()
                await eventually { delivered.withLock { $0 != nil } }
                #expect(server.requests(path: "/accepted").count == 1)
                #expect(delivered.withLock { $0?.status.code } == 201)
                // The body did not fit: delivered without it.
                #expect(delivered.withLock { $0?.body } == nil)
                #expect(try await queue.deadLetters().isEmpty)
            }
        }
    }

    @Test("a 2xx whose body fits is delivered with its body", arguments: StoreKind.allCases)
    func smallResponseKeepsItsBody(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(name: "small", store: try await place.open("small"), session: session())
                server.script("/small", [.respond(status: 200, body: Array("fits".utf8))])
                let delivered = Lock<TransportResponse?>(nil)
                try await queue.add(LimitedPost(server.baseURL + "/small", maxResponseSize: 1024)) { result in
                    delivered.withLock { $0 = try? result.get() }
                }
                await queue.waitUntilEmpty()
                await eventually { delivered.withLock { $0 != nil } }
                #expect(delivered.withLock { $0?.body } == Data("fits".utf8))
            }
        }
    }

    @Test("a queued request keeps its endpoint's timeout: a server that never answers fails the attempt at that timeout", arguments: StoreKind.allCases)
    func keepsTheEndpointTimeout(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(name: "slow", store: try await place.open("slow"), session: session(), retryInterval: .seconds(3600))
                server.script("/never", [.stall])
                var events = queue.events.makeAsyncIterator()
                try await queue.add(LimitedPost(server.baseURL + "/never", timeout: .milliseconds(300)))
                // Without the endpoint's timeout the attempt would wait for the session's 60 s
                // idle limit and the suite's time limit would end the test first.
                guard case .paused(_, _, let reason)? = await events.next() else {
                    Issue.record("no pause")
                    return
                }
                #expect(reason == "transport failure: timedOut")
            }
        }
    }
}
