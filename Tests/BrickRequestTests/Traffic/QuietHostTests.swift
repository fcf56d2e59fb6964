@testable import BrickRequestCore
import BrickTesting
import Foundation
import HTTPTypes
import Testing

/// The quiet host: first attempts to the session's first host admitted, and their successes
/// counted, without traffic control's lock while nothing about the host can hold one back — and
/// everything counted so arriving in the host's state before anything reads it.
@Suite("Traffic control's quiet host", .timeLimit(.minutes(3)))
struct QuietHostTests {
    private let ok = TransportResponse(status: .ok)

    /// Admits a first attempt to `url`; `nil` when it was not admitted at once.
    private func admit(_ traffic: TrafficControl, _ url: String = "http://api.test/") throws -> TrafficControl.Ticket? {
        var ticket = traffic.ticket(for: try TransportRequest(method: .get, url: url), kind: .first)
        guard case .proceed = traffic.advance(&ticket) else { return nil }
        return ticket
    }

    @Test("the pending count: one bucket per word, the rest through the lock")
    func pendingCount() {
        let count = PendingCount(window: .seconds(10))  // 1 s buckets
        // (Results are bound first: #expect cannot borrow a noncopyable value.)
        let added = [
            count.add(at: .milliseconds(500)),  // bucket 0, the word's first
            count.add(at: .milliseconds(999)),
            count.add(at: .seconds(1)),  // bucket 1: the word holds bucket 0
        ]
        #expect(added == [true, true, false])
        let taken = count.take(at: .milliseconds(1_500))
        #expect(taken.count == 2)
        #expect(taken.at == .zero)
        let moved = count.add(at: .milliseconds(1_200))  // the word moved to bucket 1
        #expect(moved)
        // A take with an earlier time (read before another thread's) keeps the later bucket.
        let early = count.take(at: .milliseconds(100))
        #expect(early.count == 1)
        #expect(early.at == .seconds(1))
        let again = [count.add(at: .milliseconds(1_900)), count.add(at: .milliseconds(900))]
        #expect(again == [true, false])
        let last = [count.take(at: .seconds(3)).count, count.take(at: .seconds(3)).count]
        #expect(last == [1, 0])
    }

    @Test("quiet means nothing can hold a first attempt back", arguments: [
        ("standard", HostPolicy.standard, true),
        ("no breaker, no budget", HostPolicy(circuitBreaker: nil, retryBudget: nil), true),
        ("a rate", HostPolicy(rate: .perSecond(10, burst: 10)), false),
        ("a cap", HostPolicy(maximumConcurrentRequests: 4), false),
    ])
    func quietByPolicy(name: String, policy: HostPolicy, quiet: Bool) {
        #expect(HostTraffic(policy: policy, at: .zero).isQuiet(at: .zero) == quiet, "\(name)")
    }

    @Test("a pause, a learned rate and an open breaker each end the quiet")
    func quietEnds() {
        var changes: [HostTraffic.Change] = []
        var progress = HostTraffic.Progress()
        var paused = HostTraffic(policy: .standard, at: .zero)
        _ = paused.admit(.first, progress: &progress, at: .zero, deadline: nil, waiter: 1, changes: &changes)
        _ = paused.finished(.status(503, retryAfter: .seconds(5)), progress: progress, at: .zero, changes: &changes)
        #expect(!paused.isQuiet(at: .seconds(1)))
        #expect(paused.isQuiet(at: .seconds(6)))  // the pause is over

        var throttled = HostTraffic(policy: .standard, at: .zero)
        progress = HostTraffic.Progress()
        _ = throttled.admit(.first, progress: &progress, at: .zero, deadline: nil, waiter: 1, changes: &changes)
        _ = throttled.finished(.status(429, retryAfter: nil), progress: progress, at: .zero, changes: &changes)
        #expect(!throttled.isQuiet(at: .seconds(1)))

        let breaker = CircuitBreakerPolicy(failureRatio: 0.5, minimumRequests: 2)
        var broken = HostTraffic(policy: HostPolicy(circuitBreaker: breaker), at: .zero)
        for _ in 0..<2 {
            progress = HostTraffic.Progress()
            _ = broken.admit(.first, progress: &progress, at: .zero, deadline: nil, waiter: 1, changes: &changes)
            _ = broken.finished(.failure(.cannotConnect), progress: progress, at: .zero, changes: &changes)
        }
        #expect(broken.breaker?.isClosed == false)
        #expect(!broken.isQuiet(at: .seconds(1)))
    }

    @Test("first attempts admitted quietly earn retry budget")
    func quietAttemptsEarnBudget() throws {
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(ManualClock())) { _ in }
        for _ in 0..<50 {
            let ticket = try #require(try admit(traffic))
            traffic.finished(ticket, .success(ok))
        }
        // The first went under the lock and made the host quiet; the other 49 did not take it.
        // 20 % of 50 first attempts plus 10 a second over 10 s.
        #expect(traffic.state(forHost: "api.test")?.retryBudgetLeft == 110)
    }

    @Test("successes counted quietly weigh against failures: the breaker opens at its ratio, not before")
    func quietSuccessesCountForTheBreaker() throws {
        let policy = HostPolicy(circuitBreaker: CircuitBreakerPolicy(failureRatio: 0.5, minimumRequests: 10))
        let traffic = TrafficControl(policies: HostPolicies(default: policy), clock: SessionClock(ManualClock())) { _ in }
        for _ in 0..<10 {
            traffic.finished(try #require(try admit(traffic)), .success(ok))
        }
        let failure = TransportError(.cannotConnect, message: "refused")
        for _ in 0..<9 {
            traffic.finished(try #require(try admit(traffic)), .failure(failure))
        }
        // 9 failures of 19: had the quiet successes been lost, 9 of 9 would have opened it.
        #expect(traffic.state(forHost: "api.test")?.circuit == .closed)
        traffic.finished(try #require(try admit(traffic)), .failure(failure))
        #expect(traffic.state(forHost: "api.test")?.circuit != .closed)
        // Open: the next first attempt is refused, not admitted quietly.
        #expect(try admit(traffic) == nil)
    }

    @Test("a bare 429 ends the quiet: the learned rate paces the next first attempts")
    func throttlingEndsTheQuiet() throws {
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(ManualClock())) { _ in }
        for _ in 0..<20 {
            traffic.finished(try #require(try admit(traffic)), .success(ok))
        }
        traffic.finished(try #require(try admit(traffic)), .success(TransportResponse(status: .tooManyRequests)))
        #expect(traffic.state(forHost: "api.test")?.isRateLowered == true)
        var held = 0
        for _ in 0..<5 {
            if let ticket = try admit(traffic) {
                traffic.finished(ticket, .success(ok))
            } else {
                held += 1
            }
        }
        #expect(held > 0)
    }

    @Test("another spelling of the quiet host and other hosts go under the lock, and count")
    func otherSpellingsCount() throws {
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(ManualClock())) { _ in }
        for _ in 0..<10 {
            for url in ["http://api.test/", "http://API.test:80/", "http://api.test/", "http://other.test/"] {
                traffic.finished(try #require(try admit(traffic, url)), .success(ok))
            }
        }
        #expect(traffic.state(forHost: "api.test")?.retryBudgetLeft == 106)  // 100 + 20 % of 30
        #expect(traffic.state(forHost: "other.test")?.retryBudgetLeft == 102)
        #expect(traffic.hostCount == 2)
    }

    @Test("a quiet host forgotten while idle is made again with what was counted after")
    func forgottenAndMadeAgain() throws {
        let clock = ManualClock()
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(clock)) { _ in }
        traffic.finished(try #require(try admit(traffic)), .success(ok))
        clock.advance(by: TrafficControl.idleTime + .seconds(1))
        // Another host's admission sweeps: api.test is forgotten.
        traffic.finished(try #require(try admit(traffic, "http://other.test/")), .success(ok))
        #expect(traffic.state(forHost: "api.test") == nil)
        for _ in 0..<10 {
            traffic.finished(try #require(try admit(traffic)), .success(ok))
        }
        #expect(traffic.state(forHost: "api.test")?.retryBudgetLeft == 102)
    }

    @Test("eight threads admitting and finishing at once: every first attempt is counted")
    func concurrentCounting() async throws {
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(ManualClock())) { _ in }
        let request = try TransportRequest(method: .get, url: "http://api.test/")
        let ok = self.ok
        await withTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var admitted = 0
                    for _ in 0..<1_000 {
                        var ticket = traffic.ticket(for: request, kind: .first)
                        guard case .proceed = traffic.advance(&ticket) else { continue }
                        admitted += 1
                        traffic.finished(ticket, .success(ok))
                    }
                    return admitted
                }
            }
            var admitted = 0
            for await count in group { admitted += count }
            #expect(admitted == 8_000)
        }
        // 100 + 20 % of 8,000.
        #expect(traffic.state(forHost: "api.test")?.retryBudgetLeft == 1_700)
    }
}
