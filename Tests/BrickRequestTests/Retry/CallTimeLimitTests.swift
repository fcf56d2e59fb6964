import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// A GET endpoint with its own `timeout`.
final class TimedEndpoint: Component, GETRequestType, ValidatedResponseType, DataResponseType {
    let session: Session
    let urlString: String
    let timeout: Duration?
    let autoRetryConfiguration: AutoRetryConfiguration
    init(_ url: String, session: Session, timeout: Duration?, retry: AutoRetryConfiguration = .init(breakTime: .seconds(1))) {
        self.urlString = url
        self.session = session
        self.timeout = timeout
        self.autoRetryConfiguration = retry
        super.init()
    }
}

/// The rule of an in-memory call: it never waits past its own `timeout` or `maxTotalDuration`
/// (from its first attempt), nor longer than its host's wait for a `Retry-After`; a longer one
/// ends the call at once with the response and the date the server named.
@Suite("A call's own time limits bound its retry waits", .timeLimit(.minutes(2)))
struct CallTimeLimitTests {
    /// Runs `call` on a session whose clock is `clock`; a wait the call should not have made shows
    /// as a sleeper on the clock, which is then released so the test fails instead of hanging.
    private func runWithoutWaiting<T: Sendable>(
        _ clock: ManualClock,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ call: @escaping @Sendable () async -> T
    ) async -> T {
        let task = Task { await call() }
        let finished = Lock(false)
        let watcher = Task {
            _ = await task.childValue
            finished.withLock { $0 = true }
        }
        await eventually { finished.withLock { $0 } || clock.waiterCount > 0 }
        if !finished.withLock({ $0 }) {
            Issue.record("the call waited on the clock", sourceLocation: sourceLocation)
            while !finished.withLock({ $0 }) {
                clock.advance(by: .seconds(3600))
                await Task.yield()
            }
        }
        await watcher.childValue
        return await task.childValue
    }

    @Test("timeout 1 s, a real server's 429 with Retry-After: 10: delivered at once, the server's date on the response and the error")
    func retryAfterBeyondTimeout() async throws {
        try await withServer { server in
            let clock = ManualClock()
            let session = Session(clock: clock)
            server.script("/limited", [.status(429, retryAfter: "10"), .ok("ok")])
            let before = Date()
            let response = await runWithoutWaiting(clock) {
                await TimedEndpoint(server.baseURL + "/limited", session: session, timeout: .seconds(1)).response()
            }
            #expect(response.status == .tooManyRequests)
            #expect(response.error?.code == .unacceptableStatusCode)
            #expect(server.requests(path: "/limited").count == 1)
            let notBefore = try #require(response.notBefore)
            #expect(notBefore >= before.addingTimeInterval(10) && notBefore <= Date().addingTimeInterval(10))
            #expect(response.error?.notBefore == notBefore)
        }
    }

    @Test("Retry-After: 1000000000000 with timeout 3 s ends the call at once; the date saturates (2^31 s), never ignored")
    func hugeRetryAfter() async throws {
        try await withServer { server in
            let clock = ManualClock()
            let session = Session(clock: clock)
            server.script("/huge", [.status(503, retryAfter: "1000000000000"), .ok("ok")])
            let response = await runWithoutWaiting(clock) {
                await TimedEndpoint(server.baseURL + "/huge", session: session, timeout: .seconds(3)).response()
            }
            #expect(response.status == .serviceUnavailable)
            let notBefore = try #require(response.notBefore)
            #expect(notBefore > Date().addingTimeInterval(Double(Int64(1) << 31) - 60))
        }
    }

    @Test("no timeout: a Retry-After over the host's 30 s wait ends the call at once; 30 s or less is waited for")
    func hostWaitBoundsRetryAfter() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        let session = Session.testing(stub, clock: clock, reachability: ManualReachability())
        stub.stub(.get, "/long", StubResponse(status: .tooManyRequests, headers: [.retryAfter: "31"]), .status(.ok))
        let long = await runWithoutWaiting(clock) {
            await TimedEndpoint("https://api.example.com/long", session: session, timeout: nil).response()
        }
        #expect(long.status == .tooManyRequests)
        #expect(long.notBefore != nil)
        stub.stub(.get, "/short", StubResponse(status: .serviceUnavailable, headers: [.retryAfter: "30"]), .status(.ok))
        // Another host: the first one is paused for every caller for 31 s (traffic control).
        let task = Task { await TimedEndpoint("https://other.example.com/short", session: session, timeout: nil).response() }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(30))
        let short = await task.childValue
        #expect(short.status == .ok)
        #expect(short.notBefore == nil)
    }

    @Test("a host policy that waits longer lets the call wait longer")
    func hostPolicyWait() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        let session = Session.testing(
            stub,
            configuration: Session.Configuration(
                hostPolicies: HostPolicies(default: HostPolicy(whenLimited: .wait(atMost: .seconds(120))))
            ),
            clock: clock,
            reachability: ManualReachability()
        )
        stub.stub(.get, "/slow", StubResponse(status: .tooManyRequests, headers: [.retryAfter: "100"]), .status(.ok))
        let task = Task { await TimedEndpoint("https://api.example.com/slow", session: session, timeout: nil).response() }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(100))
        #expect(await task.childValue.status == .ok)
    }

    @Test("each retry is sent with what is left of the call's timeout")
    func retryGetsRemainingTimeout() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        let session = Session.testing(stub, clock: clock, reachability: ManualReachability())
        stub.stub(.get, "/orders", .status(.serviceUnavailable), .status(.ok))
        let task = Task {
            await TimedEndpoint(
                "https://api.example.com/orders",
                session: session,
                timeout: .seconds(3),
                retry: .init(breakTime: .seconds(2))
            ).response()
        }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(2))
        #expect(await task.childValue.status == .ok)
        #expect(stub.requests.map(\.options.timeout) == [.seconds(3), .seconds(1)])
    }

    @Test("maxTotalDuration runs from the call's first attempt, not from the session's creation")
    func totalDurationFromFirstAttempt() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        let session = Session.testing(stub, clock: clock, reachability: ManualReachability())
        clock.advance(by: .seconds(3600))  // a session an hour old
        stub.stub(.get, "/orders", .status(.serviceUnavailable), .status(.ok))
        let task = Task {
            await TimedEndpoint(
                "https://api.example.com/orders",
                session: session,
                timeout: nil,
                retry: .init(breakTime: .seconds(1), maxTotalDuration: .seconds(60))
            ).response()
        }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(1))
        let response = await task.childValue
        #expect(response.status == .ok)
        #expect(response.retryCount == 1)
    }

    @Test("the callback form too: maxTotalDuration runs from the call's first attempt on an hour-old session")
    func totalDurationFromFirstAttemptCallback() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        let session = Session.testing(stub, clock: clock, reachability: ManualReachability())
        clock.advance(by: .seconds(3600))
        stub.stub(.get, "/callback", .status(.serviceUnavailable), .status(.ok))
        let delivered = Delivered<Response<Data, BrickError>>()
        TimedEndpoint(
            "https://api.example.com/callback",
            session: session,
            timeout: nil,
            retry: .init(breakTime: .seconds(1), maxTotalDuration: .seconds(60))
        ).response { delivered.add($0) }.resume()
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(1))
        let response = try await delivered.first()
        #expect(response.status == .ok)
        #expect(response.retryCount == 1)
    }

    @Test("parked while offline, a call with a timeout ends at its deadline with its last failure")
    func parkingBoundedByTimeout() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        let reachability = ManualReachability()
        reachability.set(.unreachable)
        let session = Session.testing(stub, clock: clock, reachability: reachability)
        stub.stub(.get, "/feed", .failure(.notConnected), .status(.ok))
        let task = Task { await TimedEndpoint("https://api.example.com/feed", session: session, timeout: .seconds(5)).response() }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(5))
        let response = await task.childValue
        #expect(response.error?.code == .notConnected)
        #expect(stub.requests.count == 1)
    }
}
