import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// The end of a command-line tool: wait until everything is delivered, close, and a `for await`
/// loop over the events ends having seen every outcome.
// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("Closing a queue and a manager: event loops end, nothing emitted before is lost", .timeLimit(.minutes(3)))
struct ClosingTests {
    @Test("queue: waitUntilEmpty, close; the listener saw every delivery and its loop ended; a closed queue refuses entries", arguments: StoreKind.allCases)
    func queue(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(name: "tool", store: try await place.open("tool"), session: session())
                let events = queue.events
                let listener = Task {
                    var delivered = 0
                    for await event in events { if case .delivered = event { delivered += 1 } }
                    return delivered
                }
                for amount in 1...5 { try await queue.add(RecordSale(server.baseURL + "/post", amount: amount)) }
                await queue.waitUntilEmpty()
                await queue.close()
                #expect(await listener.childValue == 5)
                await #expect(throws: BrickError.self) { try await queue.add(RecordSale(server.baseURL + "/post", amount: 6)) }
                #expect(server.requests(path: "/post").count == 5)
            }
        }
    }

    @Test("manager: waitUntilEmpty returns once every request finished; close ends the listener's loop", arguments: StoreKind.allCases)
    func manager(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let manager = OfflineRequestManager(name: "tool", store: try await place.open("tool"), session: session())
                let events = manager.events
                let listener = Task {
                    var finished = 0
                    for await event in events { if case .finished = event { finished += 1 } }
                    return finished
                }
                for amount in 1...4 { try await manager.queueRequest(RecordSale(server.baseURL + "/post", amount: amount)) }
                await manager.waitUntilEmpty()
                #expect(server.requests(path: "/post").count == 4)
                manager.close()
                #expect(await listener.childValue == 4)
                await #expect(throws: BrickError.self) { try await manager.queueRequest(RecordSale(server.baseURL + "/post", amount: 5)) }
            }
        }
    }

    @Test("manager: waitUntilEmpty on an empty manager returns at once")
    func emptyManager() async throws {
        try await withDirectory { directory in
            let manager = OfflineRequestManager(
                name: "empty",
                store: try SQLiteOfflineStore(name: "empty", directory: directory),
                session: session()
            )
            await manager.waitUntilEmpty()
            manager.close()
        }
    }
}
