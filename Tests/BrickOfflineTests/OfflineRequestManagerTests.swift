import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// How each named mock behaves and what it did: shared, since requests are values read back from disk.
final class MockBoard: Sendable {
    struct Behaviour {
        var error: (any Error)?
        var fixOnResubmission = false
        var stalled = false
        /// How long `perform` runs (sending heartbeats) before it reports progress and ends.
        var runsFor: Duration = .zero
        var performed = 0
        /// Attempts running now, and the most that ever ran at once.
        var running = 0
        var mostRunning = 0
    }
    private let behaviours = Lock<[String: Behaviour]>([:])
    func set(_ name: String, _ change: (inout Behaviour) -> Void) {
        behaviours.withLock { change(&$0[name, default: Behaviour()]) }
    }
    func get(_ name: String) -> Behaviour { behaviours.withLock { $0[name, default: Behaviour()] } }
}

struct TestFailure: Error, Equatable { var domain = "test"; var code = -1 }

/// The seed's MockRequest: reports progress in steps of 0.2 every millisecond, then completes
/// with its board's error (if any); a stalled one never completes.
struct MockRequest: OfflineRequest {
    static let kind = "test.mock"
    /// The board of the test running now. Behind a lock: an attempt a previous test left running
    /// (a stalled one, cancelled) may still read it while the next test sets its own (a data race
    /// ThreadSanitizer found when the board was a bare static).
    private static let current = Lock(MockBoard())
    static var board: MockBoard {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
    var name: String
    var board: MockBoard { Self.board }

    func perform(_ context: OfflineRequestContext) async throws {
        // One board for the whole attempt: its end is counted where its start was.
        let board = self.board
        board.set(name) {
            $0.performed += 1
            $0.running += 1
            $0.mostRunning = max($0.mostRunning, $0.running)
        }
        defer { board.set(name) { $0.running -= 1 } }
        if board.get(name).stalled {
            try await Task.sleep(for: .seconds(3600))
        }
        let runsFor = board.get(name).runsFor
        let end = ContinuousClock.now + runsFor
        while ContinuousClock.now < end {
            context.sendHeartbeat()
            try await Task.sleep(for: .milliseconds(20))
        }
        for step in 1...5 {
            try await Task.sleep(for: .milliseconds(1))
            context.updateProgress(Double(step) * 0.2)
        }
        if let error = board.get(name).error { throw error }
    }

    func shouldAttemptResubmission(for error: any Error) -> Bool {
        guard board.get(name).fixOnResubmission else { return false }
        board.set(name) { $0.error = nil }
        return true
    }
}

/// A delegate that records what it hears and can veto or fix.
final class Listener: OfflineRequestManagerDelegate {
    let log = Lock<[String]>([])
    let vetoes = Lock(false)
    /// How many times `shouldAttempt` was asked.
    let asked = Lock(0)
    let fixer = Lock<(@Sendable (MockRequest) -> Bool)?>(nil)
    func offlineRequestManager(_ manager: OfflineRequestManager, shouldAttempt request: any OfflineRequest) -> Bool {
        asked.withLock { $0 += 1 }
        return !vetoes.withLock { $0 }
    }
    func offlineRequestManager(_ manager: OfflineRequestManager, shouldReattempt request: any OfflineRequest, after error: any Error) -> Bool {
        guard let mock = request as? MockRequest, let fixer = fixer.withLock({ $0 }) else { return false }
        return fixer(mock)
    }
    func offlineRequestManager(_ manager: OfflineRequestManager, didStart request: any OfflineRequest) {
        log.withLock { $0.append("started \((request as? MockRequest)?.name ?? "?") at \(manager.progress)") }
    }
    func offlineRequestManager(_ manager: OfflineRequestManager, didFinish request: any OfflineRequest) {
        log.withLock { $0.append("finished \((request as? MockRequest)?.name ?? "?") at \(manager.progress)") }
    }
    func offlineRequestManager(_ manager: OfflineRequestManager, didFail request: any OfflineRequest, with error: any Error) {
        log.withLock { $0.append("failed \((request as? MockRequest)?.name ?? "?") at \(manager.progress): \(error)") }
    }
}

// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("OfflineRequestManager: the seed's scenarios, on SQLite and on PostgreSQL", .serialized, .timeLimit(.minutes(3)))
struct OfflineRequestManagerTests {
    /// A manager with its cap and delegate set before `register` starts it.
    static func manager(_ place: StorePlace, cap: Int = 1, delegate: Listener? = nil) async throws -> OfflineRequestManager {
        let manager = OfflineRequestManager(
            name: "test_manager",
            store: try await place.open("test_manager"),
            session: Session(reachability: ManualReachability())
        )
        manager.simultaneousRequestCap = cap
        manager.delegate = delegate
        manager.register(MockRequest.self)
        return manager
    }

    @Test("O1: queued requests are read back by a new manager, in order, with the time they were queued", arguments: StoreKind.allCases)
    func persistence(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            let listener = Listener()
            listener.vetoes.withLock { $0 = true }
            var queuedAt: [Date] = []
            do {
                let manager = try await Self.manager(place, delegate: listener)
                try await manager.queueRequest(MockRequest(name: "one"))
                try await manager.queueRequest(MockRequest(name: "two"))
                queuedAt = try await manager.store.list(queue: "test_manager").map(\.createdAt)
                // The process "ends": its loop stops before the next one opens the store.
                await manager.stop(gracePeriod: .seconds(5))
            }
            let second = Listener()
            second.vetoes.withLock { $0 = true }
            let reopened = try await Self.manager(place, delegate: second)
            // Registering started it: the head is looked at and vetoed (kept, not leased).
            await eventually { second.asked.withLock { $0 } >= 1 }
            await eventually { (try? await reopened.store.list(queue: "test_manager").allSatisfy { $0.lease == nil }) == true }
            #expect(await reopened.totalRequestCount == 2)
            let pending = try await reopened.pendingRequests()
            #expect(pending.compactMap { ($0 as? MockRequest)?.name } == ["one", "two"])
            #expect(try await reopened.store.list(queue: "test_manager").map(\.createdAt) == queuedAt)
        }
    }

    @Test("O2–O5: progress is 0 at the start, steps with the request (0.2 … 1.0), and 1 at the finish", arguments: StoreKind.allCases)
    func lifecycleAndProgress(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            let manager = try await Self.manager(place)
            let listener = Listener()
            manager.delegate = listener
            let events = manager.events
            #expect(manager.progress == 1)
            try await manager.queueRequest(MockRequest(name: "single"))
            var progress: [Double] = []
            for await event in events {
                if case .progress(let value) = event { progress.append(value) }
                if case .finished = event { break }
            }
            #expect(progress.map { ($0 * 10).rounded() / 10 } == [0, 0.2, 0.4, 0.6, 0.8, 1.0])
            #expect(listener.log.withLock { $0 } == ["started single at 0.0", "finished single at 1.0"])
        }
    }

    @Test("O4 + O8: a failure that is not network-class is reported once, with its error, and not retried", arguments: StoreKind.allCases)
    func failure(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            MockRequest.board.set("bad") { $0.error = TestFailure() }
            let manager = try await Self.manager(place)
            let listener = Listener()
            manager.delegate = listener
            let events = manager.events
            try await manager.queueRequest(MockRequest(name: "bad"))
            for await event in events { if case .failed = event { break } }
            #expect(listener.log.withLock { $0.last } == "failed bad at 1.0: TestFailure(domain: \"test\", code: -1)")
            #expect(MockRequest.board.get("bad").performed == 1)
            #expect(try await manager.deadLetters().count == 1)
            #expect(await manager.totalRequestCount == 0)
        }
    }

    @Test("O9 + O10: a request or the delegate that fixes the error gets another attempt, which finishes", arguments: StoreKind.allCases)
    func resubmission(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            MockRequest.board.set("self-fixing") {
                $0.error = TestFailure()
                $0.fixOnResubmission = true
            }
            MockRequest.board.set("fixed-by-delegate") { $0.error = TestFailure() }
            let manager = try await Self.manager(place)
            let listener = Listener()
            listener.fixer.withLock {
                $0 = { request in
                    guard MockRequest.board.get(request.name).error != nil else { return false }
                    MockRequest.board.set(request.name) { $0.error = nil }
                    return true
                }
            }
            manager.delegate = listener
            let events = manager.events
            try await manager.queueRequest(MockRequest(name: "self-fixing"))
            try await manager.queueRequest(MockRequest(name: "fixed-by-delegate"))
            var finished = 0
            for await event in events {
                if case .finished = event { finished += 1 }
                if finished == 2 { break }
            }
            #expect(MockRequest.board.get("self-fixing").performed == 2)
            #expect(MockRequest.board.get("fixed-by-delegate").performed == 2)
            #expect(try await manager.deadLetters().isEmpty)
        }
    }

    @Test("O6: 5 + 5 requests queued from two tasks at once all finish", arguments: StoreKind.allCases)
    func concurrentQueueing(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            let manager = try await Self.manager(place)
            let events = manager.events
            await withThrowingTaskGroup(of: Void.self) { group in
                for side in ["a", "b"] {
                    group.addTask {
                        for index in 0..<5 { try await manager.queueRequest(MockRequest(name: "\(side)\(index)")) }
                    }
                }
            }
            var finished = 0
            for await event in events {
                if case .finished = event { finished += 1 }
                if finished == 10 { break }
            }
            #expect(finished == 10)
            #expect(manager.progress == 1)
        }
    }

    @Test("O11: an attempt past the time limit is killed and fails with code -1, \"Offline Request Timed Out\"", arguments: StoreKind.allCases)
    func timeLimit(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            MockRequest.board.set("stalled") { $0.stalled = true }
            let manager = OfflineRequestManager(name: "timeouts", store: try await place.open("timeouts"), session: Session(reachability: ManualReachability()))
            manager.register(MockRequest.self)
            manager.requestTimeLimit = .milliseconds(300)
            let listener = Listener()
            manager.delegate = listener
            let events = manager.events
            try await manager.queueRequest(MockRequest(name: "stalled"))
            // A stalled request never ends by itself: its failure is the time limit's (the event is
            // the proof; how soon it came is the machine's — a loaded run took over 2 s).
            for await event in events { if case .failed = event { break } }
            #expect(listener.log.withLock { $0.last } == "failed stalled at 1.0: Offline Request Timed Out")
        }
    }

    @Test("O12: pending requests can be merged while one runs; the running one stays ahead", arguments: StoreKind.allCases)
    func modifyPending(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            MockRequest.board.set("request1") { $0.stalled = true }
            let manager = try await Self.manager(place)
            let events = manager.events
            for name in ["request1", "request2", "request3"] { try await manager.queueRequest(MockRequest(name: name)) }
            for await event in events { if case .started = event { break } }
            let seen = Lock<[String]>([])
            try await manager.modifyPendingRequests { pending in
                let names = pending.compactMap { ($0 as? MockRequest)?.name }
                seen.withLock { $0 = names }
                return [MockRequest(name: names.joined(separator: " + "))]
            }
            #expect(seen.withLock { $0 } == ["request2", "request3"])
            #expect(await manager.totalRequestCount == 2)
            #expect(try await manager.pendingRequests().compactMap { ($0 as? MockRequest)?.name } == ["request2 + request3"])
            try await manager.clearAllRequests()
            #expect(await manager.totalRequestCount == 0)
            #expect(manager.progress == 1)
        }
    }

    @Test("a network-class failure keeps the request; with a cap of 1 it holds the others back until it succeeds", arguments: StoreKind.allCases)
    func networkFailureKeeps(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            MockRequest.board.set("offline") { $0.error = BrickError.notConnected }
            let clock = ManualClock()
            let manager = OfflineRequestManager(
                name: "keeps",
                store: try await place.open("keeps"),
                session: Session(reachability: ManualReachability(), clock: clock)
            )
            manager.register(MockRequest.self)
            manager.simultaneousRequestCap = 1
            let events = manager.events
            try await manager.queueRequest(MockRequest(name: "offline"))
            try await manager.queueRequest(MockRequest(name: "behind"))
            for await event in events { if case .kept = event { break } }
            // The barrier: the loop handled a wake-up after keeping the entry, and went idle.
            let idle = manager.loopIdleCount
            manager.attemptSubmission()
            await eventually { manager.loopIdleCount > idle }
            #expect(MockRequest.board.get("behind").performed == 0)
            MockRequest.board.set("offline") { $0.error = nil }
            clock.advance(by: .seconds(11))
            var finished = 0
            for await event in events {
                if case .finished = event { finished += 1 }
                if finished == 2 { break }
            }
            #expect(MockRequest.board.get("offline").performed == 2)
            #expect(MockRequest.board.get("behind").performed == 1)
        }
    }

    @Test("a request that runs longer than its lease is never started a second time, and its success is recorded", arguments: StoreKind.allCases)
    func longAttemptKeepsItsLease(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            // A lease of 5 s, extended every 1.7 s, under a run of 12 s (more than two leases): a
            // loaded machine (a whole suite starting every test at once beside a second build, a
            // PostgreSQL server on the same two cores) starved the lease keeper past the end of a
            // 300 ms and then of a 600 ms lease; the extension is what is tested, not its latency.
            MockRequest.board.set("long") { $0.runsFor = .seconds(12) }
            let manager = try await Self.manager(place, cap: 4)
            manager.leaseDuration = .seconds(5)
            let events = manager.events
            try await manager.queueRequest(MockRequest(name: "long"))
            // Others queued while it runs wake the loop, which leases whatever is due.
            for index in 0..<6 {
                try await Task.sleep(for: .milliseconds(200))
                try await manager.queueRequest(MockRequest(name: "short\(index)"))
            }
            var finished = 0
            for await event in events {
                if case .storeFailed(let failure) = event { Issue.record("store failure: \(failure)") }
                if case .finished = event { finished += 1 }
                if finished == 7 { break }
            }
            #expect(MockRequest.board.get("long").performed == 1)
            #expect(MockRequest.board.get("long").mostRunning == 1)
            #expect(await manager.totalRequestCount == 0)
            #expect(try await manager.deadLetters().isEmpty)
        }
    }

    @Test("a stored request whose kind is not registered waits (not attempted, not set aside) until its type is registered; a brick endpoint is delivered meanwhile", arguments: StoreKind.allCases)
    func unregisteredAndEndpoint(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                MockRequest.board = MockBoard()
                let listener = Listener()
                listener.vetoes.withLock { $0 = true }
                do {
                    let first = OfflineRequestManager(name: "kinds", store: try await place.open("kinds"), session: Session(reachability: ManualReachability()))
                    first.delegate = listener
                    first.register(MockRequest.self)
                    try await first.queueRequest(MockRequest(name: "orphan"))
                    await first.stop(gracePeriod: .seconds(5))
                }
                let manager = OfflineRequestManager(name: "kinds", store: try await place.open("kinds"), session: Session(reachability: ManualReachability()))
                let events = manager.events
                try await manager.queueRequest(RecordSale(server.baseURL + "/post", amount: 5))
                // The endpoint is delivered; the orphan is looked at, kept waiting for its type.
                for await event in events {
                    if case .failed(_, let error) = event { Issue.record("set aside: \(error)") }
                    if case .finished = event { break }
                }
                #expect(server.requests(path: "/post").count == 1)
                await eventually { (try? await manager.store.list(queue: "kinds").first?.lastAttempt?.error?.contains("not registered")) == true }
                #expect(try await manager.deadLetters().isEmpty)
                #expect(await manager.totalRequestCount == 1)
                #expect(MockRequest.board.get("orphan").performed == 0)
                // Registered: it goes out with no other call.
                manager.register(MockRequest.self)
                await eventually { await manager.totalRequestCount == 0 }
                #expect(MockRequest.board.get("orphan").performed == 1)
            }
        }
    }

    @Test("after a restart, registering the type sends every stored request, in order, with no other call", arguments: StoreKind.allCases)
    func restartSendsOnRegister(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            MockRequest.board = MockBoard()
            let listener = Listener()
            listener.vetoes.withLock { $0 = true }
            do {
                // Queued while nothing could be sent (vetoed), then the process "ends".
                let first = try await Self.manager(place, delegate: listener)
                for index in 0..<20 { try await first.queueRequest(MockRequest(name: "r\(index)")) }
                await first.stop(gracePeriod: .seconds(5))
            }
            let order = Lock<[String]>([])
            let recorder = Listener()
            let reopened = try await Self.manager(place, cap: 1, delegate: recorder)
            let events = reopened.events
            var finished = 0
            for await event in events {
                if case .started = event { }
                if case .finished = event { finished += 1 }
                if finished == 20 { break }
            }
            order.withLock { $0 = recorder.log.withLock { $0 }.filter { $0.hasPrefix("started") }.map { String($0.split(separator: " ")[1]) } }
            #expect(order.withLock { $0 } == (0..<20).map { "r\($0)" })
            #expect(await reopened.totalRequestCount == 0)
        }
    }
}
