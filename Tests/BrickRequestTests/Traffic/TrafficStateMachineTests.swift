import BrickRequest
@testable import BrickRequestCore
import Foundation
import Testing

/// The three traffic state machines and their composition, driven by hand-made times: no I/O, no
/// clock, no sleeps (as `RetryEngineTests` drives the retry engine).
@Suite("Traffic control state machines (no I/O)", .timeLimit(.minutes(3)))
struct TrafficStateMachineTests {
    static func s(_ seconds: Double) -> Duration { .milliseconds(Int64((seconds * 1000).rounded())) }

    // MARK: - Rate limiter

    /// One row: an event at a time, and what the limiter answers.
    enum RateEvent {
        case reserve(Double, maxWait: Double, RateLimiter.Reservation)
        case throttled(Double, sending: Double, RateLimiter.Change?)
        case succeeded(Double, RateLimiter.Change?)
        case rate(Double?)
    }

    static let rateTables: [(String, HostPolicy.Rate?, [RateEvent])] = [
        (
            "token bucket 2/s, burst 2: two at once, then one per half second, reserved in order",
            .perSecond(2, burst: 2),
            [
                .reserve(0, maxWait: 10, .now), .reserve(0, maxWait: 10, .now),
                .reserve(0, maxWait: 10, .after(s(0.5))), .reserve(0, maxWait: 10, .after(s(1))),
                .reserve(0, maxWait: 0.5, .refused(until: s(1.5))),  // nothing taken: the next still waits 1.5 s
                .reserve(0, maxWait: 10, .after(s(1.5))),
                .reserve(10, maxWait: 0, .now),  // refilled, up to the burst
                .reserve(10, maxWait: 0, .now), .reserve(10, maxWait: 0, .refused(until: s(10.5))),
            ]
        ),
        (
            "no rate: always now; a bare 429 halves what was sent, at most once a second",
            nil,
            [
                .reserve(0, maxWait: 0, .now), .rate(nil),
                .throttled(1, sending: 40, .lowered(to: 20)), .rate(20),
                .throttled(1.5, sending: 40, nil), .rate(20),
                .throttled(3, sending: 20, .lowered(to: 10)), .rate(10),
                .succeeded(5, nil), .rate(18),  // 10 + 40 × 0.1 × 2
                .succeeded(10, nil), .rate(38), .succeeded(11, .restored), .rate(nil),
            ]
        ),
        (
            "configured 10/s: a 429 halves it, never below 0.5/s, and successes bring it back to 10",
            .perSecond(10),
            [
                .throttled(0, sending: 0, .lowered(to: 5)), .throttled(1, sending: 0, .lowered(to: 2.5)),
                .throttled(2, sending: 0, .lowered(to: 1.25)), .throttled(3, sending: 0, .lowered(to: 0.625)),
                .throttled(4, sending: 0, .lowered(to: 0.5)), .rate(0.5),
                .succeeded(9, nil), .rate(5.5), .succeeded(14, .restored), .rate(10),
            ]
        ),
        (
            "a learned rate paces without a burst",
            nil,
            [
                .throttled(0, sending: 8, .lowered(to: 4)),
                .reserve(0, maxWait: 10, .now), .reserve(0, maxWait: 10, .after(s(0.25))),
                .reserve(0, maxWait: 10, .after(s(0.5))),
            ]
        ),
    ]

    @Test("rate limiter: token bucket and AIMD, row by row", arguments: rateTables.indices)
    func rateLimiter(table: Int) {
        let (name, configured, rows) = Self.rateTables[table]
        var limiter = RateLimiter(configured: configured)
        for (index, row) in rows.enumerated() {
            switch row {
            case .reserve(let now, let maxWait, let expected):
                let result73 = limiter.reserve(at: Self.s(now), maxWait: Self.s(maxWait))
                #expect(result73 == expected, "\(name) row \(index)")
            case .throttled(let now, let sending, let expected):
                let result76 = limiter.throttled(at: Self.s(now), sendingRate: sending)
                #expect(result76 == expected, "\(name) row \(index)")
            case .succeeded(let now, let expected):
                let result79 = limiter.succeeded(at: Self.s(now))
                #expect(result79 == expected, "\(name) row \(index)")
            case .rate(let expected):
                if let expected, let rate = limiter.rate {
                    #expect(abs(rate - expected) < 1e-9, "\(name) row \(index): \(rate)")
                } else {
                    #expect(limiter.rate == expected, "\(name) row \(index)")
                }
            }
        }
    }

    @Test("pause: the later pause wins, and ends by itself")
    func pause() {
        var limiter = RateLimiter(configured: nil)
        #expect(limiter.pause(at: .zero) == nil)
        let result95 = limiter.pause(until: .seconds(2))
        #expect(result95)
        let result97 = limiter.pause(until: .seconds(1))
        #expect(!result97)
        let result99 = limiter.pause(until: .seconds(3))
        #expect(result99)
        #expect(limiter.pause(at: .seconds(2)) == .seconds(3))
        #expect(limiter.pause(at: .seconds(3)) == nil)
        #expect(limiter.isAtRest(at: .seconds(3)))
    }

    // MARK: - Circuit breaker

    enum BreakerEvent {
        case admit(Double, CircuitBreaker.Admission, CircuitBreaker.Change? = nil)
        case record(Double, CircuitBreaker.Verdict, probe: Bool = false, CircuitBreaker.Change? = nil)
        case records(Double, CircuitBreaker.Verdict, count: Int)
        case state(CircuitBreaker.State)
    }

    static let policy = CircuitBreakerPolicy(failureRatio: 0.5, minimumRequests: 4, window: .seconds(10), breakDuration: .seconds(5))

    static let breakerTables: [(String, [BreakerEvent])] = [
        (
            "closed → open at the ratio once enough outcomes are in; refuses until the date",
            [
                .records(0, .failure, count: 3), .state(.closed),  // 3 < minimumRequests
                .record(0, .failure, .opened(until: .seconds(5))), .state(.open(until: .seconds(5))),
                .admit(1, .refuse(until: .seconds(5))), .admit(4.999, .refuse(until: .seconds(5))),
            ]
        ),
        (
            "below the ratio it stays closed; neutral outcomes count for nothing",
            [
                .records(0, .success, count: 3), .records(0, .failure, count: 2), .state(.closed),  // 2/5 < 0.5
                .records(0, .neutral, count: 50), .state(.closed),
                .record(0, .failure, .opened(until: .seconds(5))),  // 3/6 ≥ 0.5
            ]
        ),
        (
            "old outcomes leave the window",
            [
                .records(0, .failure, count: 3), .records(11, .success, count: 1), .record(11, .failure),
                .state(.closed),  // the three failures at 0 are out of the window at 11: 1 of 2
            ]
        ),
        (
            "half-open: one probe; its success closes, others are refused meanwhile",
            [
                .records(0, .failure, count: 4), .admit(5, .probe, .halfOpened), .admit(5, .refuse(until: nil)),
                .state(.halfOpen(probeOut: true)), .record(6, .success, probe: true, .closed), .state(.closed),
                .admit(6, .allow),
            ]
        ),
        (
            "half-open: the probe's failure opens it again for another break",
            [
                .records(0, .failure, count: 4), .admit(5, .probe, .halfOpened),
                .record(5.5, .failure, probe: true, .opened(until: .seconds(10.5))), .admit(6, .refuse(until: .milliseconds(10_500))),
            ]
        ),
        (
            "half-open: a neutral probe (cancelled, 4xx) lets the next attempt probe",
            [
                .records(0, .failure, count: 4), .admit(5, .probe, .halfOpened), .record(5, .neutral, probe: true),
                .state(.halfOpen(probeOut: false)), .admit(5, .probe), .admit(5, .refuse(until: nil)),
            ]
        ),
        (
            "attempts admitted before it opened change nothing when they end",
            [
                .records(0, .failure, count: 4), .records(1, .failure, count: 3), .records(1, .success, count: 3),
                .state(.open(until: .seconds(5))),
            ]
        ),
    ]

    @Test("circuit breaker: every transition of the documented table", arguments: breakerTables.indices)
    func breaker(table: Int) {
        let (name, rows) = Self.breakerTables[table]
        var breaker = CircuitBreaker(policy: Self.policy)
        for (index, row) in rows.enumerated() {
            switch row {
            case .admit(let now, let expected, let change):
                let (admission, made) = breaker.admit(at: Self.s(now))
                #expect(admission == expected, "\(name) row \(index)")
                #expect(made == change, "\(name) row \(index)")
            case .record(let now, let verdict, let probe, let change):
                let result183 = breaker.record(verdict, wasProbe: probe, at: Self.s(now))
                #expect(result183 == change, "\(name) row \(index)")
            case .records(let now, let verdict, let count):
                for _ in 0..<count { _ = breaker.record(verdict, wasProbe: false, at: Self.s(now)) }
            case .state(let expected):
                #expect(breaker.state == expected, "\(name) row \(index)")
            }
        }
    }

    @Test("what the breaker counts: network-class failures and 5xx, never 4xx or a 429")
    func verdicts() {
        let rows: [(HostTraffic.Observed, CircuitBreaker.Verdict)] = [
            (.status(200, retryAfter: nil), .success), (.status(304, retryAfter: nil), .success),
            (.status(404, retryAfter: nil), .success), (.status(400, retryAfter: nil), .success),
            (.status(429, retryAfter: nil), .neutral), (.status(429, retryAfter: .seconds(1)), .neutral),
            (.status(500, retryAfter: nil), .failure), (.status(502, retryAfter: nil), .failure),
            (.status(503, retryAfter: nil), .failure), (.status(503, retryAfter: .seconds(2)), .neutral),
            (.failure(.cannotConnect), .failure), (.failure(.timedOut), .failure),
            (.failure(.connectionReset), .failure), (.failure(.notConnected), .neutral),
            (.failure(.cannotResolveHost), .neutral), (.failure(.cancelled), .neutral), (.failure(.tls), .neutral),
            (.failure(.circuitOpen), .neutral), (.failure(.hostPaused), .neutral), (.notSent, .neutral),
        ]
        for (observed, verdict) in rows {
            #expect(HostTraffic.verdict(observed) == verdict, "\(observed)")
        }
    }

    // MARK: - Retry budget

    @Test("retry budget: ratio × first attempts + floor × window, the documented table")
    func budget() {
        var budget = RetryBudget(policy: .standard)
        #expect(budget.left(at: .zero) == 100)
        for _ in 0..<99 { #expect(budget.spend(at: .zero).allowed) }
        let result218 = budget.spend(at: .zero)
        #expect(result218 == (true, false))
        #expect(budget.spend(at: .zero) == (false, true))  // the 101st: refused, reported once
        let result221 = budget.spend(at: .zero)
        #expect(result221 == (false, false))
        for _ in 0..<1000 { budget.firstAttempt(at: .seconds(1)) }
        #expect(budget.left(at: .seconds(1)) == 200)  // 0.2 × 1000 + 100 − 100 made
        let result225 = budget.spend(at: .seconds(1)).allowed
        #expect(result225)
        // Ten seconds on, the window holds nothing: the floor alone.
        #expect(budget.left(at: .seconds(12)) == 100)
        #expect(budget.isAtRest(at: .seconds(12)))
    }

    @Test("retry budget with no floor: exactly ratio × first attempts")
    func budgetWithoutFloor() {
        var budget = RetryBudget(policy: RetryBudgetPolicy(ratio: 0.2, minimumPerSecond: 0))
        let result235 = budget.spend(at: .zero).allowed
        #expect(!result235)
        for _ in 0..<50 { budget.firstAttempt(at: .zero) }
        let made = (0..<50).filter { _ in budget.spend(at: .zero).allowed }.count
        #expect(made == 10)
    }

    // MARK: - Composition

    @Test("admission order: breaker, pause, rate, concurrency; each passed once")
    func admissionOrder() {
        var host = HostTraffic(
            policy: HostPolicy(rate: .perSecond(1, burst: 1), maximumConcurrentRequests: 1, circuitBreaker: Self.policy),
            at: .zero
        )
        var changes: [HostTraffic.Change] = []
        var first = HostTraffic.Progress()
        let result252 = host.admit(.first, progress: &first, at: .zero, deadline: .seconds(30), waiter: 1, changes: &changes)
        #expect(result252 == .proceed)
        // The second waits for its token (reserved), then for the slot (in line).
        var second = HostTraffic.Progress()
        let result256 = host.admit(.first, progress: &second, at: .zero, deadline: .seconds(30), waiter: 2, changes: &changes)
        #expect(result256 == .wait(until: .seconds(1)))
        let result258 = host.admit(.first, progress: &second, at: .seconds(1), deadline: .seconds(30), waiter: 2, changes: &changes)
        #expect(result258 == .queued)
        #expect(host.waiters == [2])
        // The first ends with a 429 and Retry-After: its slot passes to the second, and the host pauses.
        let result262 = host.finished(.status(429, retryAfter: .seconds(2)), progress: first, at: .seconds(1), changes: &changes)
        #expect(result262 == 2)
        #expect(changes == [.paused(until: .seconds(3), status: 429)])
        second.holdsSlot = true
        let result266 = host.admit(.first, progress: &second, at: .seconds(1), deadline: .seconds(30), waiter: 2, changes: &changes)
        #expect(result266 == .wait(until: .seconds(3)))
        let result268 = host.admit(.first, progress: &second, at: .seconds(3), deadline: .seconds(30), waiter: 2, changes: &changes)
        #expect(result268 == .proceed)
        // A third, failing fast: the pause is over and a token is there, but the slot is taken.
        var third = HostTraffic.Progress()
        let result272 = host.admit(.first, progress: &third, at: .seconds(3), deadline: nil, waiter: 3, changes: &changes)
        #expect(result272 == .refuse(.concurrency(cap: 1)))
        // A fourth, failing fast too: no token before 4 s.
        var early = HostTraffic.Progress()
        let result276 = host.admit(.first, progress: &early, at: .seconds(3), deadline: nil, waiter: 5, changes: &changes)
        #expect(result276 == .refuse(.rateLimited(until: .seconds(4))))
        // A pause longer than the deadline refuses at once, without waiting.
        _ = host.finished(.status(503, retryAfter: .seconds(60)), progress: second, at: .seconds(3), changes: &changes)
        var fourth = HostTraffic.Progress()
        let result281 = host.admit(.first, progress: &fourth, at: .seconds(4), deadline: .seconds(30), waiter: 4, changes: &changes)
        #expect(result281 == .refuse(.paused(until: .seconds(63))))
        #expect(host.inFlight == 0)
    }

    @Test("a pause is refused at once when the caller does not wait out pauses (offline queues)")
    func queuesDoNotWaitOutPauses() {
        var host = HostTraffic(policy: .standard, at: .zero)
        var changes: [HostTraffic.Change] = []
        _ = host.finished(.status(429, retryAfter: .seconds(2)), progress: .init(), at: .zero, changes: &changes)
        var progress = HostTraffic.Progress()
        #expect(
            host.admit(.first, progress: &progress, at: .seconds(1), deadline: .seconds(30), waitsOutPauses: false, waiter: 1, changes: &changes)
                == .refuse(.paused(until: .seconds(2)))
        )
        let result296 = host.admit(.first, progress: &progress, at: .seconds(2), deadline: .seconds(30), waitsOutPauses: false, waiter: 1, changes: &changes)
        #expect(result296 == .proceed)
    }

    @Test("a host with nothing learned and nothing in flight is idle after the idle time; one with a pause is not")
    func idleness() {
        var host = HostTraffic(policy: .standard, at: .zero)
        var changes: [HostTraffic.Change] = []
        var progress = HostTraffic.Progress()
        _ = host.admit(.first, progress: &progress, at: .zero, deadline: .seconds(30), waiter: 1, changes: &changes)
        _ = host.finished(.status(200, retryAfter: nil), progress: progress, at: .zero, changes: &changes)
        #expect(!host.isIdle(at: .seconds(299), for: .seconds(300)))
        #expect(host.isIdle(at: .seconds(300), for: .seconds(300)))
        _ = host.finished(.status(429, retryAfter: .seconds(600)), progress: .init(), at: .seconds(300), changes: &changes)
        #expect(!host.isIdle(at: .seconds(700), for: .seconds(300)))
        #expect(host.isIdle(at: .seconds(1200), for: .seconds(300)))
    }

    @Test("the retry engine: an open breaker parks only a request that may park, while the host is unreachable")
    func engineAndBreaker() {
        let open = TransportError(.circuitOpen, message: "open")
        let rows: [(AutoRetryConfiguration, Bool?, RetryEngine.Action)] = [
            (AutoRetryConfiguration(), false, .park),
            (AutoRetryConfiguration(), true, .deliver),
            (AutoRetryConfiguration(), nil, .deliver),
            (AutoRetryConfiguration(enableBackgroundRetry: false), false, .deliver),
            (AutoRetryConfiguration(failWhenNotReachable: true), false, .deliver),
            // A rule of the user's does not overrule the host's policy.
            (AutoRetryConfiguration(rule: ClosureRetryRule { _ in .retry }), true, .deliver),
        ]
        for (configuration, reachable, expected) in rows {
            var engine = RetryEngine(configuration: configuration, isIdempotent: true)
            let action = engine.attemptFinished(.failure(open), elapsed: .zero, isReachable: reachable)
            #expect(action == expected, "\(configuration) reachable: \(String(describing: reachable))")
            #expect(engine.retryCount == 0)
        }
        for kind in [TransportError.Kind.hostPaused, .rateLimited] {
            var engine = RetryEngine(configuration: AutoRetryConfiguration(rule: ClosureRetryRule { _ in .retry }), isIdempotent: true)
            let action = engine.attemptFinished(.failure(TransportError(kind, message: "x")), elapsed: .zero, isReachable: false)
            #expect(action == .deliver)
        }
    }

    @Test("the sliding window counts over its length, a bucket at a time")
    func window() {
        var window = SlidingWindow(length: .seconds(10))
        window.add(at: .zero)
        window.add(2, at: .seconds(5))
        #expect(window.total(at: .seconds(5)) == 3)
        #expect(window.total(over: .seconds(2), at: .seconds(5)) == 2)
        #expect(window.total(at: .milliseconds(10_999)) == 2)
        #expect(window.total(at: .seconds(16)) == 0)
    }

    @Test("an event a whole window older than the bucket in its slot no longer counts, and erases nothing")
    func staleEvent() {
        var window = SlidingWindow(length: .seconds(10))
        window.add(3, at: .seconds(12))
        // Bucket 2 shares bucket 12's slot: counting it there would have reset bucket 12.
        window.add(at: .seconds(2))
        #expect(window.total(at: .seconds(12)) == 3)
        window.add(at: .seconds(5))  // within the window of 12: counted
        #expect(window.total(at: .seconds(12)) == 4)
    }
}
