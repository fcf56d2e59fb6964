import BrickOfflineTestSupport
import BrickOffline
import BrickTestSupport
import BrickRequest
import BrickTesting
import Foundation
import Synchronization
import Testing

/// The manager's decision after an attempt, as a table, without I/O.
@Suite("ManagerDecision: the offline request manager's rules, as a table", .timeLimit(.minutes(3)))
struct ManagerDecisionTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let interval: Duration = .seconds(10)

    struct Other: Error, CustomStringConvertible { var description: String { "other" } }

    struct Row: Sendable, CustomStringConvertible {
        var name: String
        var error: (any Error & Sendable)?
        var asksAgain: Bool
        var heldBackUntil: Date? = nil
        var expected: ManagerDecision
        var description: String { name }
    }

    static let rows: [Row] = [
        Row(name: "success", error: nil, asksAgain: true, expected: .finished),
        Row(
            name: "time limit: never again, even if asked",
            error: OfflineRequestTimeout(), asksAgain: true,
            expected: .fail(reason: "Offline Request Timed Out")
        ),
        Row(
            name: "network-class: kept, not asked",
            error: TransportError(.cannotResolveProxy, message: "proxy"), asksAgain: false,
            expected: .keep(notBefore: now.addingTimeInterval(10), reason: "\(TransportError(.cannotResolveProxy, message: "proxy"))")
        ),
        Row(
            name: "network-class BrickError: kept",
            error: BrickError(.notConnected, message: "down"), asksAgain: false,
            expected: .keep(notBefore: now.addingTimeInterval(10), reason: "\(BrickError(.notConnected, message: "down"))")
        ),
        Row(
            name: "egress refused: never again, even if asked",
            error: BrickError.transport(TransportError(.egressRefused, message: "egress refused")), asksAgain: true,
            expected: .fail(reason: "\(BrickError.transport(TransportError(.egressRefused, message: "egress refused")))")
        ),
        Row(name: "other, asked again", error: Other(), asksAgain: true, expected: .again(reason: "other")),
        Row(name: "other, not asked", error: Other(), asksAgain: false, expected: .fail(reason: "other")),
        Row(
            name: "TLS is not network-class",
            error: TransportError(.tls, message: "bad certificate"), asksAgain: false,
            expected: .fail(reason: "\(TransportError(.tls, message: "bad certificate"))")
        ),
        Row(
            name: "held back by a host's pause: kept until its date, not counted",
            error: heldBack, asksAgain: false, heldBackUntil: now.addingTimeInterval(120),
            expected: .keep(notBefore: now.addingTimeInterval(120), reason: "\(heldBack)")
        ),
        Row(
            name: "held back without a date (a probe is out): kept for the submission interval",
            error: BrickError.transport(TransportError(.circuitOpen, message: "probe out")), asksAgain: false,
            expected: .keep(
                notBefore: now.addingTimeInterval(interval.seconds),
                reason: "\(BrickError.transport(TransportError(.circuitOpen, message: "probe out")))"
            )
        ),
    ]

    static let heldBack: BrickError = {
        var error = TransportError(.hostPaused, message: "paused")
        error.notBefore = now.addingTimeInterval(120)
        return BrickError.transport(error)
    }()

    @Test("each outcome's decision", arguments: rows)
    func decision(_ row: Row) {
        let outcome: Result<Void, any Error> = row.error.map { .failure($0) } ?? .success(())
        let decision = ManagerDecision.decide(
            outcome,
            now: Self.now,
            heldBackUntil: row.heldBackUntil,
            submissionInterval: Self.interval
        ) { _ in row.asksAgain }
        #expect(decision == row.expected)
    }
}

/// A store that fails one operation on demand, around a real one on disk.
final class FailingStore: OfflineStore {
    let inner: SQLiteOfflineStore
    let failsComplete = Lock(false)
    init(_ inner: SQLiteOfflineStore) { self.inner = inner }
    struct Refused: Error, CustomStringConvertible { var description: String { "refused by the test" } }

    func add(_ drafts: [OfflineEntry.Draft], dedupe: DedupePolicy) async throws -> [OfflineEntry.ID] { try await inner.add(drafts, dedupe: dedupe) }
    /// While set, the next `lease` waits (its cap already chosen) until ``releaseLease()``.
    let holdsLease = Lock(false)
    /// A `lease` is waiting.
    let leaseWaiting = Lock(false)
    private let leaseRelease = AsyncStream.makeStream(of: Void.self)
    func releaseLease() { leaseRelease.continuation.yield() }
    func lease(queue: String, limit: Int, cap: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        if holdsLease.withLock({ held in defer { held = false }; return held }) {
            leaseWaiting.withLock { $0 = true }
            for await _ in leaseRelease.stream { break }
        }
        return try await inner.lease(queue: queue, limit: limit, cap: cap, now: now, for: duration)
    }
    func leaseHead(queue: String, now: Date, for duration: Duration) async throws -> OfflineEntry? { try await inner.leaseHead(queue: queue, now: now, for: duration) }
    func replacePending(queue: String, ids: [OfflineEntry.ID], with drafts: [OfflineEntry.Draft]) async throws -> Bool { try await inner.replacePending(queue: queue, ids: ids, with: drafts) }
    func setAside(_ ids: [OfflineEntry.ID], reason: String, now: Date) async throws { try await inner.setAside(ids, reason: reason, now: now) }
    func extend(_ id: OfflineEntry.ID, lease: UUID, until expiry: Date) async throws -> Bool { try await inner.extend(id, lease: lease, until: expiry) }
    func extend(_ id: OfflineEntry.ID, lease: UUID, for duration: Duration, now: Date) async throws -> Bool { try await inner.extend(id, lease: lease, for: duration, now: now) }
    func complete(_ id: OfflineEntry.ID, lease: UUID) async throws -> Bool {
        if failsComplete.withLock({ $0 }) { throw Refused() }
        return try await inner.complete(id, lease: lease)
    }
    func reschedule(_ id: OfflineEntry.ID, lease: UUID, notBefore: Date, attempt: OfflineEntry.AttemptRecord, countsAttempt: Bool) async throws -> Bool {
        try await inner.reschedule(id, lease: lease, notBefore: notBefore, attempt: attempt, countsAttempt: countsAttempt)
    }
    func bury(_ id: OfflineEntry.ID, lease: UUID, reason: String, attempt: OfflineEntry.AttemptRecord?, countsAttempt: Bool) async throws -> Bool {
        try await inner.bury(id, lease: lease, reason: reason, attempt: attempt, countsAttempt: countsAttempt)
    }
    func clearPauses(queue: String, now: Date) async throws { try await inner.clearPauses(queue: queue, now: now) }
    func nextDue(queue: String) async throws -> Date? { try await inner.nextDue(queue: queue) }
    func count(queue: String) async throws -> Int { try await inner.count(queue: queue) }
    func list(queue: String) async throws -> [OfflineEntry] { try await inner.list(queue: queue) }
    func deadLetters(queue: String) async throws -> [OfflineEntry] { try await inner.deadLetters(queue: queue) }
    func retryDeadLetter(_ id: OfflineEntry.ID, now: Date) async throws { try await inner.retryDeadLetter(id, now: now) }
    func remove(_ id: OfflineEntry.ID) async throws { try await inner.remove(id) }
    func removeAll(queue: String) async throws { try await inner.removeAll(queue: queue) }
}

// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("The manager reports what its store refuses", .timeLimit(.minutes(3)))
struct ManagerStoreFailureTests {
    @Test("a store that fails to remove a finished request: storeFailed is reported, with what failed")
    func completeFails() async throws {
        try await withDirectory { directory in
            MockRequest.board = MockBoard()
            let store = FailingStore(try SQLiteOfflineStore(name: "failing", directory: directory))
            store.failsComplete.withLock { $0 = true }
            let manager = OfflineRequestManager(name: "failing", store: store, session: Session(reachability: ManualReachability()))
            let events = manager.events
            manager.register(MockRequest.self)
            try await manager.queueRequest(MockRequest(name: "done"))
            var failure: String?
            for await event in events {
                if case .storeFailed(let text) = event {
                    failure = text
                    break
                }
            }
            #expect(failure?.contains("cannot remove a finished request") == true, "\(failure ?? "none")")
            #expect(failure?.contains("refused by the test") == true)
        }
    }
}

/// A request that counts how many of its kind run at once (its own board: `MockRequest.board` is
/// replaced by other suites running beside this one).
struct CappedRequest: OfflineRequest {
    static let kind = "test.capped"
    static let board = MockBoard()
    var name: String

    func perform(_ context: OfflineRequestContext) async throws {
        Self.board.set(name) {
            $0.performed += 1
            $0.running += 1
            $0.mostRunning = max($0.mostRunning, $0.running)
        }
        defer { Self.board.set(name) { $0.running -= 1 } }
        // Long enough that ten started together would overlap, however loaded the machine.
        try await Task.sleep(for: .milliseconds(30))
    }
}

// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("Setup order does not break the cap", .timeLimit(.minutes(3)))
struct ManagerCapOrderTests {
    @Test("register starts a claim with the default cap 10; the cap set to 1 on the next line still holds: never two requests at once")
    func capSetAfterRegister() async throws {
        try await withDirectory { directory in
            let store = FailingStore(try SQLiteOfflineStore(name: "capped", directory: directory))
            let manager = OfflineRequestManager(name: "capped", store: store, session: Session(reachability: ManualReachability()))
            // 20 requests stored by an earlier run (or another process of the fleet).
            let drafts = try (0..<20).map { _ in try manager.draft(CappedRequest(name: "capped")) }
            _ = try await store.add(drafts, dedupe: .reject)
            store.holdsLease.withLock { $0 = true }
            manager.register(CappedRequest.self)
            // The loop's first claim is under way with the cap it read (10) ...
            await eventually { store.leaseWaiting.withLock { $0 } }
            // ... when the app sets the cap on the line after `register`.
            manager.simultaneousRequestCap = 1
            store.releaseLease()
            await eventually { CappedRequest.board.get("capped").performed == 20 }
            #expect(CappedRequest.board.get("capped").mostRunning == 1)
        }
    }

    @Test("the cap and the delegate are initializer parameters")
    func capInInitializer() async throws {
        try await withDirectory { directory in
            let listener = Listener()
            let manager = try OfflineRequestManager(name: "init", directory: directory, simultaneousRequestCap: 1, delegate: listener)
            #expect(manager.simultaneousRequestCap == 1)
            #expect(manager.delegate === listener)
        }
    }
}
