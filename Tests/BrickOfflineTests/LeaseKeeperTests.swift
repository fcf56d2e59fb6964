@testable import BrickOfflineCore
import BrickOffline
import BrickOfflineTestSupport
import BrickRequest
import BrickTestSupport
import Foundation
import Synchronization
import Testing

/// The queue's and manager's lease keeper: one task for all running attempts, which ends with the
/// last one and starts again for a shorter lease.
@Suite("LeaseKeeper: one round for every running lease", .timeLimit(.minutes(2)))
struct LeaseKeeperTests {
    @Test("a lease shorter than the kept ones gets its first round within a third of it (not after the longer sleep); every kept lease extends in that one call; the last stop ends the task")
    func shorterLeaseAndEnd() async throws {
        try await withDirectory { directory in
            let inner = try SQLiteOfflineStore(name: "keeper", directory: directory)
            let store = ObservedStore(inner)
            _ = try await store.add(
                (0..<2).map { OfflineEntry.Draft(queue: "q", payload: Data("\($0)".utf8), createdAt: Date()) }, dedupe: .reject
            )
            let leased = try await store.lease(queue: "q", limit: 2, now: Date(), for: .seconds(600))
            let tokens = Dictionary(uniqueKeysWithValues: leased.compactMap { entry in entry.lease.map { (entry.id, $0.token) } })
            let keeper = LeaseKeeper(store: store, now: { Date() })
            let reports = Mutex<[String]>([])
            func keep(_ id: OfflineEntry.ID, _ duration: Duration) -> LeaseKeeper.Running {
                keeper.keep(id, duration: duration, token: { tokens[id] }, report: { message in reports.withLock { $0.append(message) } })
            }
            // The first lease alone: its round would come in 200 s.
            let long = keep(leased[0].id, .seconds(600))
            // A 3 s lease: the keeper restarts for it, and both are extended within about a second.
            let short = keep(leased[1].id, .seconds(3))
            let extended = await poll(within: .seconds(60)) { store.extensionCount >= 2 ? true : nil }
            #expect(extended == true, "the shorter lease was extended well before the longer one's round")
            long.stop()
            short.stop()
            #expect(reports.withLock { $0 }.isEmpty, "\(reports.withLock { $0 })")
            // Every lease stopped: the task ended, so nothing holds the store any more.
            let released = await poll(within: .seconds(60)) { keeper.isIdle ? true : nil }
            #expect(released == true)
        }
    }
}
