import BrickRequest
@testable import BrickRequestCore
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// Records the traffic events of a session.
final class TrafficRecorder: EventMonitor {
    private let recorded = Lock<[TrafficEvent]>([])
    var events: [TrafficEvent] { recorded.withLock { $0 } }
    var kinds: [TrafficEvent.Kind] { events.map(\.kind) }

    func trafficDidChange(_ event: TrafficEvent) {
        recorded.withLock { $0.append(event) }
    }

    func count(where matches: (TrafficEvent.Kind) -> Bool) -> Int { kinds.filter(matches).count }
}

extension TrafficEvent.Kind {
    var isPaused: Bool { if case .paused = self { true } else { false } }
    var isOpened: Bool { if case .circuitOpened = self { true } else { false } }
}

/// A transport that records when each attempt is handed to the real one.
final class StartRecorder: Transport {
    let inner: any Transport
    private let starts = Lock<[ContinuousClock.Instant]>([])
    var startTimes: [ContinuousClock.Instant] { starts.withLock { $0 } }
    init(_ inner: any Transport) { self.inner = inner }

    func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        starts.withLock { $0.append(.now) }
        return inner.start(request, completion: completion)
    }
}

/// Records when a session paused a host, and when each request began (before its admission), on
/// the continuous clock.
final class PauseTimes: EventMonitor {
    private let times = Lock<[(at: ContinuousClock.Instant, until: ContinuousClock.Instant)]>([])
    private let began = Lock<[ContinuousClock.Instant]>([])
    var first: ContinuousClock.Instant? { times.withLock { $0.first?.at } }
    /// When the first pause ends, as the event said, on the continuous clock.
    var firstEnd: ContinuousClock.Instant? { times.withLock { $0.first?.until } }
    var beginTimes: [ContinuousClock.Instant] { began.withLock { $0 } }
    func trafficDidChange(_ event: TrafficEvent) {
        guard case .paused(let until, _) = event.kind else { return }
        let now = ContinuousClock.now
        let end = now.advanced(by: .seconds(until.timeIntervalSinceNow))
        times.withLock { $0.append((now, end)) }
    }
    func requestDidStart(_ request: TransportRequest) { began.withLock { $0.append(.now) } }
}

/// Sends a request on a session with the callback API, as `resume()` users do, and awaits it.
func viaCallback(_ request: Flaky) async -> Result<Data, BrickError> {
    await withCheckedContinuation { continuation in
        request.response { continuation.resume(returning: $0.result) }.resume()
    }
}

/// Traffic control in the session, against `BrickTestServer` on 127.0.0.1: the server is the
/// judge of what was sent.
@Suite("Traffic control per host against a real server", .timeLimit(.minutes(2)))
struct TrafficControlTests {
    static let noRetry = AutoRetryConfiguration(maxRetryCount: 0)

    @Test("a 429 with Retry-After: 2 pauses the host for every caller: 199 more calls wait, the server sees nothing for 2 s, all succeed")
    func pauseForEveryCaller() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        let answered = Atomic(0)
        server.route("/limited") { _ in
            answered.add(1, ordering: .relaxed).oldValue == 0 ? .status(429, retryAfter: "2") : .ok("fine")
        }
        let recorder = TrafficRecorder()
        let session = Session(eventMonitors: [recorder])
        let url = server.baseURL + "/limited"
        let retry = AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: 3)
        let first = Task { try await Flaky(url, session: session, retry: retry).value }
        await eventually { recorder.kinds.contains(where: \.isPaused) }
        #expect(session.trafficState(forHost: "127.0.0.1:\(server.port)") != nil)
        // The burst: half awaiting `value`, half through `response { }.resume()`.
        let results = await withTaskGroup(of: Result<Data, BrickError>.self) { group in
            for index in 0..<199 {
                group.addTask {
                    let call = Flaky(url, session: session, retry: Self.noRetry)
                    if index % 2 == 0 { return await viaCallback(call) }
                    do { return .success(try await call.value) } catch { return .failure(error as! BrickError) }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 199)
        #expect(results.allSatisfy { (try? $0.get()) == Data("fine".utf8) })
        #expect(try await first.childValue == Data("fine".utf8))
        let arrivals = server.requests(path: "/limited").map(\.receivedAt).sorted()
        #expect(arrivals.count == 201)  // the 429, its retry, the 199
        let limited = try #require(arrivals.first)
        // Every later request reached the server at least 2 s after the 429 was produced (the
        // client started its pause when the answer arrived, after that).
        let early = arrivals.dropFirst().filter { limited.duration(to: $0) < .seconds(2) }
        #expect(early.isEmpty, "\(early.count) requests within the pause")
        #expect(recorder.count(where: \.isPaused) == 1)
    }

    @Test("200 calls at once, the first answered 429 Retry-After: 2: from the moment the client learns it, nothing is sent for 2 s; all succeed")
    func simultaneousBurst() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        let answered = Atomic(0)
        server.route("/limited") { _ in
            answered.add(1, ordering: .relaxed).oldValue == 0 ? .status(429, retryAfter: "2") : .ok("fine")
        }
        let pauses = PauseTimes()
        let recorder = StartRecorder(CurlTransport())
        let session = Session(transport: recorder, eventMonitors: [pauses])
        let url = server.baseURL + "/limited"
        let retry = AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: 3)
        let results = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<200 {
                group.addTask {
                    let call = Flaky(url, session: session, retry: retry)
                    if index % 2 == 0 { return (try? await viaCallback(call).get()) == Data("fine".utf8) }
                    return (try? await call.value) == Data("fine".utf8)
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 200 && results.allSatisfy { $0 })
        let learned = try #require(pauses.first)
        let pauseEnd = try #require(pauses.firstEnd)
        // None may be admitted after the client learned of the pause and before its end. A request
        // admitted just before it learned still reaches the transport a moment later (a loaded or
        // sanitized run preempts threads between the two): those are the requests that had begun
        // (requestDidStart, before admission) and not yet reached the transport when it learned.
        let starts = recorder.startTimes
        let underWay = pauses.beginTimes.filter { $0 < learned }.count - starts.filter { $0 < learned }.count
        // Until the pause's end as the event gave it (about 2 s after the 429 arrived, which is a
        // moment before the monitor heard of it): at its end the waiting calls go, all at once.
        let during = starts.filter { $0 > learned && $0 < pauseEnd }
        #expect(during.count <= max(0, underWay), "\(during.count) attempts started during the pause; \(underWay) were under way")
        print("simultaneous burst: \(starts.count) attempts for 200 calls; \(starts.filter { $0 < learned }.count) sent before the 429 arrived, \(during.count) of \(underWay) under way then sent after it, the rest after the pause")
    }

    @Test("a pause longer than a request may wait fails it at once with hostPaused and its date, unsent")
    func pauseRefusesFast() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.script("/busy", [.status(503, retryAfter: "120")])
        var configuration = Session.Configuration()
        configuration.hostPolicies.default.whenLimited = .wait(atMost: .seconds(5))
        let session = Session(configuration: configuration)
        let url = server.baseURL + "/busy"
        // Before the 503 arrives: its pause ends 120 s after it arrived, so at least 120 s after
        // this (taken after the first call, a starved start of a loaded run put 22 s between).
        let started = Date()
        #expect(await errorCode { try await Flaky(url, session: session, retry: Self.noRetry).value } == .unacceptableStatusCode)
        let error = await #expect(throws: BrickError.self) { try await Flaky(url, session: session, retry: Self.noRetry).value }
        #expect(error?.code == .hostPaused)
        let until = try #require(error?.notBefore)
        #expect(until.timeIntervalSince(started) > 100)
        #expect(error?.description.contains("asked every caller to wait until") == true)
        #expect(server.requests(path: "/busy").count == 1)
    }

    @Test("a bare 429 lowers the host's rate (AIMD) and the state says so")
    func bare429LowersRate() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.script("/slow-down", [.status(429)])
        let recorder = TrafficRecorder()
        let session = Session(eventMonitors: [recorder])
        await #expect(throws: BrickError.self) { try await Flaky(server.baseURL + "/slow-down", session: session, retry: Self.noRetry).value }
        let state = try #require(session.trafficState(forHost: "127.0.0.1"))
        #expect(state.isRateLowered)
        #expect(state.rate == RateLimiter.minimumRate)  // one request sent: the floor
        #expect(recorder.kinds == [.rateLowered(perSecond: RateLimiter.minimumRate)])
    }

    @Test("a host that fails every request: the breaker opens, callers fail fast unsent, one probe per break, a good probe closes it")
    func breaker() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        let healthy = Atomic(false)
        server.route("/down") { _ in healthy.load(ordering: .relaxed) ? .ok("up") : .status(500) }
        let clock = ManualClock()
        let recorder = TrafficRecorder()
        var configuration = Session.Configuration()
        configuration.hostPolicies.default.circuitBreaker = CircuitBreakerPolicy(minimumRequests: 20, breakDuration: .seconds(5))
        let session = Session(configuration: configuration, clock: clock, eventMonitors: [recorder])
        let url = server.baseURL + "/down"
        for _ in 0..<20 {
            #expect(await errorCode { try await Flaky(url, session: session, retry: Self.noRetry).value } == .unacceptableStatusCode)
        }
        #expect(recorder.count(where: \.isOpened) == 1)
        // Open: 1,000 callers fail at once with the date, and the server sees none of them.
        var latencies: [Duration] = []
        for _ in 0..<1000 {
            let start = ContinuousClock.now
            let error = await #expect(throws: BrickError.self) { try await Flaky(url, session: session, retry: Self.noRetry).value }
            latencies.append(start.duration(to: .now))
            #expect(error?.code == .circuitOpen)
            #expect(error?.notBefore != nil)
        }
        #expect(server.requests(path: "/down").count == 20)
        latencies.sort()
        print("circuit open: 1,000 callers failed fast, p50 \(latencies[500]) p99 \(latencies[990]) max \(latencies[999])")
        guard case .open? = session.trafficState(forHost: "127.0.0.1")?.circuit else {
            Issue.record("the breaker is not open")
            return
        }
        // Three break intervals: each lets exactly one probe reach the server, among 50 callers.
        for round in 1...3 {
            clock.advance(by: .seconds(5))
            if round == 3 { healthy.store(true, ordering: .relaxed) }
            let outcomes = await withTaskGroup(of: BrickError.Code?.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        do {
                            _ = try await Flaky(url, session: session, retry: Self.noRetry).value
                            return nil
                        } catch let error as BrickError {
                            return error.code
                        } catch {
                            return .transport
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let fastFailures = outcomes.filter { $0 == .circuitOpen }.count
            if round < 3 {
                // The probe failed: the one request of the round the server saw.
                #expect(server.requests(path: "/down").count == 20 + round)
                #expect(fastFailures == 49, "round \(round)")
            } else {
                // The probe succeeded and closed the breaker: callers after it went through.
                let successes = outcomes.filter { $0 == nil }.count
                #expect(successes >= 1 && successes + fastFailures == 50)
                #expect(server.requests(path: "/down").count == 22 + successes)
            }
        }
        #expect(session.trafficState(forHost: "127.0.0.1")?.circuit == .closed)
        #expect(recorder.kinds.filter { $0 == .circuitHalfOpened }.count == 3)
        #expect(recorder.count(where: \.isOpened) == 3)
        #expect(recorder.kinds.last == .circuitClosed)
        // Closed again: calls go through.
        #expect(try await Flaky(url, session: session, retry: Self.noRetry).value == Data("up".utf8))
    }

    @Test("a 5xx storm with retries on: total attempts ≤ (1 + budget) × first attempts")
    func retryBudget() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.route("/storm") { _ in .status(500) }
        var configuration = Session.Configuration()
        configuration.hostPolicies.default.circuitBreaker = nil
        configuration.hostPolicies.default.retryBudget = RetryBudgetPolicy(ratio: 0.2, minimumPerSecond: 0, window: .seconds(60))
        let recorder = TrafficRecorder()
        let session = Session(configuration: configuration, eventMonitors: [recorder])
        let retry = AutoRetryConfiguration(breakTime: .zero, maxRetryCount: 5)
        let firsts = 200
        let retried = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<firsts {
                group.addTask {
                    let call = Flaky(server.baseURL + "/storm", session: session, retry: retry)
                    let response = await call.response()
                    #expect(response.result.failure?.code == .unacceptableStatusCode)  // the original error
                    return response.retryCount
                }
            }
            return await group.reduce(0, +)
        }
        let attempts = server.requests(path: "/storm").count
        print("retry budget 20 %: \(firsts) first attempts, \(attempts - firsts) retries (\(retried) counted by callers), unbudgeted would be \(firsts * 6)")
        #expect(attempts == firsts + retried)
        #expect(Double(attempts) <= 1.2 * Double(firsts))
        #expect(retried >= 30)  // the budget allows retries: it is not simply off
        #expect(recorder.kinds.contains(.retryBudgetExhausted))
    }

    @Test("a concurrency cap of 1: the second caller waits for the first to finish; with .fail it is refused at once")
    func concurrencyCap() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        var configuration = Session.Configuration()
        configuration.hostPolicies["127.0.0.1"] = HostPolicy(maximumConcurrentRequests: 1)
        let session = Session(configuration: configuration)
        let url = server.baseURL + "/delay/0.3"
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<3 {
                group.addTask { #expect((try? await Flaky(url, session: session, retry: Self.noRetry).value) != nil) }
            }
        }
        // One at a time: each request reached the server only after the previous answer (0.3 s).
        let arrivals = server.requests(path: "/delay/0.3").map(\.receivedAt).sorted()
        #expect(arrivals.count == 3)
        for (earlier, later) in zip(arrivals, arrivals.dropFirst()) {
            #expect(earlier.duration(to: later) >= .milliseconds(300))
        }

        var failing = Session.Configuration()
        failing.hostPolicies["127.0.0.1"] = HostPolicy(maximumConcurrentRequests: 1, whenLimited: .fail)
        let strict = Session(configuration: failing)
        let slow = Task { try await Flaky(server.baseURL + "/delay/1", session: strict, retry: Self.noRetry).value }
        await eventually { strict.trafficState(forHost: "127.0.0.1")?.inFlight == 1 }
        let error = await #expect(throws: BrickError.self) {
            try await Flaky(server.baseURL + "/get", session: strict, retry: Self.noRetry).value
        }
        #expect(error?.code == .rateLimited)
        #expect(server.requests(path: "/get").isEmpty)
        _ = try await slow.childValue
        #expect(strict.trafficState(forHost: "127.0.0.1")?.inFlight == 0)
    }

    @Test("a configured rate: waiters are released one token at a time on the session clock")
    func rateOnManualClock() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        let clock = ManualClock()
        var configuration = Session.Configuration()
        configuration.hostPolicies.default = HostPolicy(rate: .perSecond(1, burst: 1))
        let session = Session(configuration: configuration, clock: clock)
        let url = server.baseURL + "/get"
        let calls = (0..<3).map { _ in Task { try await Flaky(url, session: session, retry: Self.noRetry).value } }
        await eventually { server.requests(path: "/get").count == 1 && clock.waiterCount == 2 }
        clock.advance(by: .seconds(1))
        await eventually { server.requests(path: "/get").count == 2 }
        #expect(clock.waiterCount == 1)
        clock.advance(by: .seconds(1))
        for call in calls { _ = try await call.value }
        #expect(server.requests(path: "/get").count == 3)
    }

    @Test("an open breaker parks a request that may park while the host is unreachable, instead of failing it")
    func openBreakerParks() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/flaky", .failure(.cannotConnect))
        let clock = ManualClock()
        let reachability = ManualReachability()
        var configuration = Session.Configuration()
        configuration.hostPolicies.default.circuitBreaker = CircuitBreakerPolicy(minimumRequests: 2, breakDuration: .seconds(5))
        let session = Session(configuration: configuration, transport: stub, reachability: reachability, clock: clock)
        let url = "http://api.test/flaky"
        for _ in 0..<2 {
            #expect(await errorCode { try await Flaky(url, session: session, retry: Self.noRetry).value } == .cannotConnect)
        }
        // Reachable: fail fast.
        #expect(await errorCode { try await Flaky(url, session: session, retry: Self.noRetry).value } == .circuitOpen)
        // Unreachable: park (spending nothing) until the network returns, then go through the breaker again.
        reachability.set(.unreachable)
        stub.stub(.get, "/flaky", .json("{}"))
        let watchers = reachability.subscriberCount  // the session's own, forwarding changes to the transport
        let parked = Task { try await Flaky(url, session: session, retry: AutoRetryConfiguration(maxRetryCount: 0)).value }
        // Parked: waiting for the network (not merely started: a request refused and not yet
        // parked when the network returns fails fast, as a reachable host's does).
        await eventually { reachability.subscriberCount == watchers + 1 }
        #expect(session.runningRequests == 1 && stub.requests.count == 2)
        clock.advance(by: .seconds(5))  // the break is over: the next admission is the probe
        reachability.set(.reachable)
        #expect(try await parked.childValue == Data("{}".utf8))
        #expect(stub.requests.count == 3)
        #expect(session.trafficState(forHost: "api.test")?.circuit == .closed)
    }

    @Test("idle hosts are forgotten; a host with something learned is kept", .timeLimit(.minutes(3)))
    func eviction() throws {
        let clock = ManualClock()
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(clock)) { _ in }
        for index in 0..<500 {
            let request = try TransportRequest(method: .get, url: "http://host\(index).test/")
            var ticket = traffic.ticket(for: request, kind: .first)
            guard case .proceed = traffic.advance(&ticket) else {
                Issue.record("not admitted")
                return
            }
            let status: HTTPResponse.Status = index == 0 ? .tooManyRequests : .ok
            let response = TransportResponse(status: status, headerFields: index == 0 ? [.retryAfter: "3600"] : [:])
            traffic.finished(ticket, .success(response))
        }
        #expect(traffic.hostCount == 500)
        clock.advance(by: TrafficControl.idleTime)
        var another = traffic.ticket(for: try TransportRequest(method: .get, url: "http://another.test/"), kind: .first)
        _ = traffic.advance(&another)
        // host0 is paused for an hour: kept; the 499 others forgotten; `another` is new.
        #expect(traffic.hostCount == 2)
        #expect(traffic.state(forHost: "host0.test")?.pausedUntil != nil)
    }
}

/// Past ``TrafficControl/maximumHosts``: admission does not sweep the whole table each time,
/// the table shrinks, learned rates recover over silence, and spellings of one host are one host.
@Suite("Traffic control with many hosts", .timeLimit(.minutes(2)))
struct ManyHostsTests {
    /// Admits one attempt to `url` and finishes it with `status` (and a `Retry-After`, if given).
    private func exchange(_ traffic: TrafficControl, _ url: String, status: HTTPResponse.Status = .ok, retryAfter: String? = nil) throws {
        let request = try TransportRequest(method: .get, url: url)
        var ticket = traffic.ticket(for: request, kind: .first)
        guard case .proceed = traffic.advance(&ticket) else {
            Issue.record("\(url) was not admitted")
            return
        }
        let headers: HTTPFields = retryAfter.map { [.retryAfter: $0] } ?? [:]
        traffic.finished(ticket, .success(TransportResponse(status: status, headerFields: headers)))
    }

    @Test("6,000 hosts that each answered a bare 429: no sweep per admission, the table bounded, and empty again once they are silent")
    func sixThousandThrottledHosts() throws {
        let clock = ManualClock()
        let traffic = TrafficControl(policies: HostPolicies(), clock: SessionClock(clock)) { _ in }
        for index in 0..<6_000 {
            try exchange(traffic, "http://host\(index).test/", status: .tooManyRequests)
            clock.advance(by: .milliseconds(1))  // 6 s in all: within one sweep interval
        }
        // All within one sweep interval: the table was swept no more than once per interval
        // (today: once per admission past 4,096 hosts, each a walk over the whole table).
        #expect(traffic.sweepCount <= 1)
        #expect(traffic.hostCount == 6_000)
        clock.advance(by: TrafficControl.sweepInterval - .seconds(6))
        try exchange(traffic, "http://other.test/")
        #expect(traffic.sweepCount == 1)
        // Over the bound: the least recently used unused hosts go, down to three quarters of it.
        #expect(traffic.hostCount <= TrafficControl.maximumHosts * 3 / 4 + 1)
        #expect(traffic.state(forHost: "host5999.test") != nil)
        #expect(traffic.state(forHost: "host0.test") == nil)
        // Two hours of silence: every learned rate has recovered; the hosts are forgotten.
        clock.advance(by: .seconds(7_200))
        try exchange(traffic, "http://late.test/")
        #expect(traffic.hostCount == 1)
    }

    @Test("a learned rate counts as recovered after enough silence; a pending pause does not")
    func silenceRestoresRate() {
        var limiter = RateLimiter(configured: nil)
        _ = limiter.throttled(at: .zero, sendingRate: 40)
        #expect(limiter.learned == 20)
        #expect(!limiter.hasRecovered(at: .seconds(1)))
        // 20 + 40 × 0.1 × 5 = 40: back at the ceiling after 5 s of silence.
        #expect(limiter.hasRecovered(at: .seconds(5)))
        #expect(limiter.isAtRest(at: .seconds(300)))
        _ = limiter.pause(until: .seconds(3_600))
        #expect(!limiter.isAtRest(at: .seconds(300)))
    }

    @Test("HOST, host, host:80, host. (http) and host:443 (https) are one host each scheme; host:8080 is another", arguments: [
        ("http://HOST.test/", "host.test"),
        ("http://host.test:80/", "host.test"),
        ("http://host.test./", "host.test"),
        ("http://Host.Test.:80/a", "host.test"),
        ("https://host.test:443/", "host.test"),
        ("https://host.test:80/", "host.test:80"),
        ("http://host.test:443/", "host.test:443"),
        ("http://host.test:8080/", "host.test:8080"),
        ("http://host.test.:8080/", "host.test:8080"),
        ("http://[::1]:80/", "[::1]"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("http://127.0.0.1:80/", "127.0.0.1"),
    ])
    func hostKeys(url: String, key: String) throws {
        let request = try TransportRequest(method: .get, url: url)
        #expect(request.trafficKey == key)
        // The last host is found again by its authority as spelled (the same spelling, the same key).
        let spelled = request.spelledAuthority
        #expect(request.hasSpelledAuthority(spelled.bytes, isHTTPS: spelled.isHTTPS))
        #expect(!request.hasSpelledAuthority(spelled.bytes + [UInt8(ascii: "x")], isHTTPS: spelled.isHTTPS))
        #expect(!request.hasSpelledAuthority(spelled.bytes, isHTTPS: !(spelled.isHTTPS ?? false)))
    }

    @Test("a concurrency cap of 1 holds across spellings of one host")
    func capAcrossSpellings() throws {
        let traffic = TrafficControl(
            policies: HostPolicies(default: HostPolicy(maximumConcurrentRequests: 1, whenLimited: .fail)),
            clock: SessionClock(ManualClock())
        ) { _ in }
        let first = try TransportRequest(method: .get, url: "http://host.test/")
        var firstTicket = traffic.ticket(for: first, kind: .first)
        guard case .proceed = traffic.advance(&firstTicket) else {
            Issue.record("the first attempt was not admitted")
            return
        }
        for spelling in ["http://HOST.test/", "http://host.test:80/", "http://host.test./"] {
            let request = try TransportRequest(method: .get, url: spelling)
            var ticket = traffic.ticket(for: request, kind: .first)
            guard case .refuse = traffic.advance(&ticket) else {
                Issue.record("\(spelling) was admitted beside the first: a cap of 1 became more")
                continue
            }
        }
        #expect(traffic.hostCount == 1)
    }
}

/// The code of the error `body` throws, or `nil` when it succeeds.
func errorCode(_ body: () async throws -> some Any) async -> BrickError.Code? {
    do {
        _ = try await body()
        return nil
    } catch let error as BrickError {
        return error.code
    } catch {
        return .transport
    }
}
