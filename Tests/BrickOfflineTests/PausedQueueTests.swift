import BrickOffline
import BrickOfflineTestSupport
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// A queue an operator paused: its delivery loop reads the pause before each lease and claims
/// nothing until the queue is resumed (`brick-queue pause` / `resume` set it in the store).
@Suite("A paused queue claims nothing until resumed", .timeLimit(.minutes(3)))
struct PausedQueueTests {
    @Test("paused in the store: the loop looks (the barrier), claims nothing and sends nothing; resumed, it delivers")
    func pauseAndResume() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let store = try await SQLiteOfflineStore.open(name: "paused", directory: directory)
                try await store.setPaused(true, queue: "hooks")
                #expect(try await store.pausedQueues().keys.sorted() == ["hooks"])
                let observed = ObservedStore(store)
                var looks = observed.pausedReads.makeAsyncIterator()
                let queue = PersistentRequestQueue(name: "hooks", store: observed, session: session())
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 1))
                // The loop took its turn and found the queue paused: nothing was leased or sent.
                #expect(await looks.next() == "hooks")
                #expect(server.requests(path: "/post").isEmpty)
                let entries = try await store.list(queue: "hooks")
                #expect(entries.count == 1)
                #expect(entries.first?.lease == nil)
                #expect(entries.first?.attempts == 0)

                try await store.setPaused(false, queue: "hooks")
                #expect(try await store.pausedQueues().isEmpty)
                queue.startProcessing()   // a SQLite store has no wake-ups of its own: this process wakes its loop
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/post").count == 1)
                await queue.close()
            }
        }
    }
}
