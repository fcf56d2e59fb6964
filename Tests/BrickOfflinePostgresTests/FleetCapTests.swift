#if !BRICK_SQLITE_ONLY
import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// Two workers of a fleet sharing a queue's cap on PostgreSQL, in one process (each with a store
/// object and client of its own, as two processes would have).
@Suite("A worker whose fleet holds the whole cap waits, it does not spin", .timeLimit(.minutes(2)))
struct FleetCapTests {
    @Test("cap 1 held by one worker: the other, with an entry due, goes idle until woken")
    func capHeldElsewhere() async throws {
        try await withServer { server in
            server.script("/stall", [.stall])
            try await withStorePlace(.postgres) { place in
                let first = PersistentRequestQueue(
                    name: "fleet", store: try await place.open("fleet"), session: Session(), simultaneousRequestCap: 1
                )
                try await first.add(RecordSale(server.baseURL + "/stall", amount: 1))
                try await first.add(RecordSale(server.baseURL + "/stall", amount: 2))
                // The first worker attempts the head; its lease holds the fleet's cap of 1.
                await eventually { server.requests(path: "/stall").count == 1 }
                let second = PersistentRequestQueue(
                    name: "fleet", store: try await place.open("fleet"), session: Session(), simultaneousRequestCap: 1
                )
                // The barrier: the second worker's loop leased nothing (the cap is taken) with an
                // entry due, and went idle. Spinning, it never would.
                let idle = second.loopIdleCount
                second.startProcessing()
                await eventually { second.loopIdleCount > idle }
                #expect(server.requests(path: "/stall").count == 1)
                await second.close(gracePeriod: .zero)
                await first.close(gracePeriod: .zero)
            }
        }
    }
}
#endif
