import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// A GET endpoint on a given session, for calls made beside a queue.
final class Ping: Component, GETRequestType, ValidatedResponseType, DataResponseType {
    let session: Session
    let urlString: String
    var autoRetryConfiguration: AutoRetryConfiguration { AutoRetryConfiguration(maxRetryCount: 0) }
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// Records whether a session paused a host.
final class PauseWatch: EventMonitor {
    private let paused = Atomic(false)
    var sawPause: Bool { paused.load(ordering: .relaxed) }
    func trafficDidChange(_ event: TrafficEvent) {
        if case .paused = event.kind { paused.store(true, ordering: .relaxed) }
    }
}

/// Offline queues obey their session's traffic control: a host paused by a `429` is not sent to,
/// and a held-back entry spends no attempt.
// 3 minutes: the PostgreSQL case waits for the shared server's first start inside its limit, and
// a whole run beside a second build exceeded 2 (2026-11-29).
@Suite("Offline queues under a host's traffic policy", .timeLimit(.minutes(3)))
struct QueueTrafficTests {
    @Test(
        "a queue of 100 entries and 50 calls to a host that answers 429 Retry-After: 2 to the first: nothing reaches it during the pause, all are delivered, no attempt spent",
        arguments: StoreKind.allCases
    )
    func pausedHost(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let answered = Atomic(0)
                server.route("/limited") { _ in
                    answered.add(1, ordering: .relaxed).oldValue == 0 ? .status(429, retryAfter: "2") : .ok("fine")
                }
                // The pause runs on a ManualClock: it lasts until the test advances the clock.
                let clock = ManualClock()
                let watch = PauseWatch()
                let session = Session(reachability: ManualReachability(), clock: clock, eventMonitors: [watch])
                let queue = PersistentRequestQueue(
                    name: "limited",
                    store: try await place.open("limited"),
                    session: session,
                    retryInterval: .seconds(2)
                )
                let events = queue.events
                let url = server.baseURL + "/limited"
                try await queue.add(RecordSale(url, amount: 0))
                await eventually { watch.sawPause }
                // Each of the 99 others may make one attempt only: a hold that spent one would
                // send it to the dead letters.
                for amount in 1..<100 {
                    try await queue.add(RecordSale(url, amount: amount), options: .init(maxAttempts: 1))
                }
                let calls = (0..<50).map { _ in Task { (try? await Ping(url, session: session).value) == Data("fine".utf8) } }
                // Every entry held back (rescheduled with the host's reason), every call waiting.
                var heldBack = Set<OfflineEntry.ID>()
                for await event in events {
                    if case .paused(let id, _, let reason) = event, reason.contains("asked every caller to wait") {
                        heldBack.insert(id)
                    }
                    if heldBack.count == 99 { break }
                }
                await eventually { session.runningRequests == 50 }
                #expect(server.requests(path: "/limited").count == 1)  // nothing but the 429
                clock.advance(by: .seconds(3))
                for call in calls { #expect(await call.value) }
                await queue.waitUntilEmpty()
                #expect(try await queue.deadLetters().isEmpty)
                #expect(server.requests(path: "/limited").count == 151)  // the 429, then 100 deliveries and 50 calls
            }
        }
    }

    @Test("the manager keeps a brick endpoint bound for a paused host until the pause ends, then delivers it; nothing reaches the host meanwhile")
    func managerKeepsHeldBack() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let answered = Atomic(0)
                server.route("/limited") { _ in
                    answered.add(1, ordering: .relaxed).oldValue == 0 ? .status(429, retryAfter: "2") : .ok("fine")
                }
                let clock = ManualClock()
                let session = Session(reachability: ManualReachability(), clock: clock)
                let url = server.baseURL + "/limited"
                #expect((try? await Ping(url, session: session).value) == nil)
                let manager = OfflineRequestManager(
                    name: "limited",
                    store: try SQLiteOfflineStore(name: "limited", directory: directory),
                    session: session
                )
                let events = manager.events
                let id = try await manager.queueRequest(RecordSale(url, amount: 1))
                var kept: String?
                for await event in events {
                    if case .kept(let keptID, let error) = event, keptID == id {
                        kept = error
                        #expect(server.requests(path: "/limited").count == 1)
                        clock.advance(by: .seconds(3))
                    }
                    if case .finished(let finishedID) = event, finishedID == id { break }
                    if case .failed(let failedID, let error) = event, failedID == id {
                        Issue.record("failed: \(error)")
                        break
                    }
                }
                #expect(kept?.contains("asked every caller to wait") == true)
                #expect(server.requests(path: "/limited").count == 2)
            }
        }
    }
}
