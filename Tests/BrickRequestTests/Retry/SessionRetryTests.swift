import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// A GET or POST endpoint whose session, URL, method and retry configuration are given.
final class Flaky: Component, ValidatedResponseType, DataResponseType {
    let session: Session
    let urlString: String
    let method: HTTPRequest.Method
    let autoRetryConfiguration: AutoRetryConfiguration
    init(_ url: String, method: HTTPRequest.Method = .get, session: Session, retry: AutoRetryConfiguration) {
        self.method = method
        self.urlString = url
        self.session = session
        self.autoRetryConfiguration = retry
        super.init()
    }
}

final class CreateOrder: Component, POSTRequestType, IdempotentRequestType, ValidatedResponseType, DataResponseType {
    let session: Session
    let urlString: String
    let autoRetryConfiguration: AutoRetryConfiguration
    init(_ url: String, session: Session, retry: AutoRetryConfiguration) {
        self.urlString = url
        self.session = session
        self.autoRetryConfiguration = retry
        super.init()
    }
}

/// Answers 503 from inside `start`, then returns its handle only once the session's clock has a
/// sleeper (the retry's backoff) — the first attempt's handle arrives after the backoff's.
final class CompletesBeforeReturning: Transport {
    let clock: ManualClock
    let returned = Lock(false)
    init(clock: ManualClock) { self.clock = clock }

    func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        completion(.success(TransportResponse(status: .serviceUnavailable, body: Data())))
        let deadline = Date().addingTimeInterval(30)
        // The backoff's sleep is registered by the task the retry creates just before it attaches
        // that task's handle: by the time the waiter shows, the handle is (almost always) attached.
        while clock.waiterCount == 0 && Date() < deadline { usleep(1000) }
        returned.withLock { $0 = true }
        return TransportTask {}
    }
}

/// The network is down exactly while a transport delivers a result, as seen from the delivering
/// thread, and up for every other look: the retry engine must judge a failure by the network the
/// attempt met, however late it runs.
final class DownWhileDelivering: Transport, ReachabilityMonitor {
    let inner: any Transport
    private let deliveringThread = Lock<pthread_t?>(nil)
    init(_ inner: any Transport) { self.inner = inner }

    func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        inner.start(request) { result in
            self.deliveringThread.withLock { $0 = pthread_self() }
            completion(result)
            self.deliveringThread.withLock { $0 = nil }
        }
    }

    func status(for host: String) -> ReachabilityStatus {
        deliveringThread.withLock { $0 == pthread_self() } ? .unreachable : .reachable
    }

    func changes() -> AsyncStream<Void> { AsyncStream { _ in } }
}

/// A monitor that counts how often it is asked, and answers "reachable".
final class CountingReachability: ReachabilityMonitor {
    private let queries = Lock(0)
    var count: Int { queries.withLock { $0 } }

    func status(for host: String) -> ReachabilityStatus {
        queries.withLock { $0 += 1 }
        return .reachable
    }

    func changes() -> AsyncStream<Void> { AsyncStream { _ in } }
}

@Suite("The session retries: ManualClock, StubTransport, ManualReachability", .timeLimit(.minutes(2)))
struct SessionRetryTests {
    let clock = ManualClock()
    let stub: StubTransport
    let reachability = ManualReachability()
    let session: Session

    init() {
        stub = StubTransport(clock: clock)
        session = Session.testing(stub, clock: clock, reachability: reachability)
    }

    @Test("503, 503, 200 succeeds on the third attempt, each retry exactly breakTime later")
    func serviceUnavailableTwice() async throws {
        stub.stub(.get, "/orders", .status(.serviceUnavailable), .status(.serviceUnavailable), .status(.ok))
        let request = Flaky("https://api.example.com/orders", session: session, retry: .init(breakTime: .seconds(5)))
        let delivered = Delivered<Response<Data, BrickError>>()
        request.response { delivered.add($0) }.resume()
        await eventually { clock.waiterCount == 1 }
        #expect(stub.requests.count == 1)
        #expect(request.state == .retrying(1))
        clock.advance(by: .milliseconds(4999))
        #expect(stub.requests.count == 1)
        clock.advance(by: .milliseconds(1))
        await eventually { clock.waiterCount == 1 && stub.requests.count == 2 }
        clock.advance(by: .seconds(5))
        let response = try await delivered.first()
        #expect(response.status == .ok)
        #expect(response.retryCount == 2)
        #expect(stub.requests.count == 3)
        #expect(clock.now.offset == .seconds(10))
    }

    @Test("persistent failure: maxRetryCount + 1 attempts, then the last failure", arguments: [0, 3])
    func exhaustion(retries: Int) async throws {
        stub.stub(.get, "/down", .status(.serviceUnavailable))
        let task = Task {
            await Flaky(
                "https://api.example.com/down",
                session: session,
                retry: .init(breakTime: .seconds(1), maxRetryCount: retries)
            ).response()
        }
        for attempt in 1...retries + 1 where attempt <= retries {
            await eventually { clock.waiterCount == 1 && stub.requests.count == attempt }
            clock.advance(by: .seconds(1))
        }
        let response = await task.childValue
        #expect(response.error?.code == .unacceptableStatusCode)
        #expect(response.retryCount == retries)
        #expect(stub.requests.count == retries + 1)
    }

    @Test("429 with Retry-After: 30 waits 30 s, not breakTime")
    func retryAfterObeyed() async throws {
        stub.stub(.get, "/limited", StubResponse(status: .tooManyRequests, headers: [.retryAfter: "30"]), .status(.ok))
        let task = Task {
            await Flaky("https://api.example.com/limited", session: session, retry: .init(breakTime: .seconds(1)))
                .response()
        }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(29))
        #expect(stub.requests.count == 1)
        clock.advance(by: .seconds(1))
        #expect(await task.childValue.status == .ok)
        #expect(stub.requests.count == 2)
    }

    @Test("offline: the request parks without spending attempts and goes as soon as the network returns")
    func parking() async throws {
        reachability.set(.unreachable)
        stub.stub(.get, "/feed", .failure(.notConnected), .status(.ok))
        let request = Flaky("https://api.example.com/feed", session: session, retry: .init(maxRetryCount: 1))
        let delivered = Delivered<Response<Data, BrickError>>()
        let watchers = reachability.subscriberCount  // the session's own, forwarding changes to the transport
        request.response { delivered.add($0) }.resume()
        await eventually { reachability.subscriberCount == watchers + 1 }
        #expect(request.state == .parked)
        #expect(stub.requests.count == 1)
        #expect(clock.waiterCount == 0)  // parked, not on a timer
        reachability.set(.reachable)
        let response = try await delivered.first()
        #expect(response.status == .ok)
        #expect(response.retryCount == 0)
        #expect(stub.requests.count == 2)
    }

    @Test("failWhenNotReachable fails at once without sending")
    func failFast() async throws {
        reachability.set(.unreachable)
        let response = await Flaky(
            "https://api.example.com/feed",
            session: session,
            retry: .init(failWhenNotReachable: true)
        ).response()
        #expect(response.error == .notConnected)
        #expect(stub.requests.isEmpty)
    }

    @Test("a first attempt is never blocked by reachability")
    func firstAttemptAlwaysSent() async throws {
        reachability.set(.unreachable)
        stub.stub(.get, "/feed", .status(.ok))
        let response = await Flaky("https://api.example.com/feed", session: session, retry: .init()).response()
        #expect(response.status == .ok)
    }

    @Test("a failure met while offline parks (no attempt spent) even when the engine runs after the network is back")
    func reachabilityJudgedAtFailure() async throws {
        for viaHandler in [true, false] {
            let stub = StubTransport(clock: clock)
            stub.stub(.get, "/feed", .failure(.notConnected), .status(.ok))
            let network = DownWhileDelivering(stub)
            let session = Session(transport: network, reachability: network, clock: clock)
            // breakTime 0: if the failure were counted as a retry, the retry would go at once.
            let request = Flaky("https://api.example.com/feed", session: session, retry: .init(breakTime: .zero))
            let response: Response<Data, BrickError>
            if viaHandler {
                let delivered = Delivered<Response<Data, BrickError>>()
                request.response { delivered.add($0) }.resume()
                response = try await delivered.first()
            } else {
                response = await request.response()
            }
            #expect(response.status == .ok, "via handler: \(viaHandler)")
            #expect(response.retryCount == 0, "via handler: \(viaHandler)")
            #expect(stub.requests.count == 2, "via handler: \(viaHandler)")
        }
    }

    @Test("the network is looked up only for a failure that means no network, not for a retried status")
    func reachabilityLookedUpOnlyWhenItMatters() async throws {
        let monitor = CountingReachability()
        let session = Session(transport: stub, reachability: monitor, clock: clock)
        stub.stub(.get, "/busy", .status(.serviceUnavailable), .status(.serviceUnavailable), .status(.ok))
        let busy = await Flaky("https://api.example.com/busy", session: session, retry: .init(breakTime: .zero))
            .response()
        #expect(busy.status == .ok)
        #expect(busy.retryCount == 2)
        #expect(monitor.count == 0)
        // A no-network failure is judged by the route: one lookup, on the thread that delivers it.
        stub.stub(.get, "/offline", .failure(.notConnected), .status(.ok))
        let offline = await Flaky("https://api.example.com/offline", session: session, retry: .init(breakTime: .zero))
            .response()
        #expect(offline.status == .ok)
        #expect(offline.retryCount == 1)
        #expect(monitor.count == 1)
    }

    @Test("an error after retries says how many were made and over how long (the session clock); one at the first attempt says nothing of retries")
    func errorSaysRetries() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/down", .status(.serviceUnavailable), .status(.serviceUnavailable), .status(.serviceUnavailable), .status(.serviceUnavailable))
        stub.stub(.get, "/once", .status(.serviceUnavailable))
        let session = Session.testing(stub)
        let retried = await Flaky("https://api.example.com/down", session: session, retry: .soft).response()
        #expect(retried.retryCount == 3)
        let error = try #require(retried.error)
        #expect("\(error)".hasSuffix("(status 503) after 3 retries over 15 s"), "\(error)")
        let once = await Flaky("https://api.example.com/once", session: session, retry: .none).response()
        let first = try #require(once.error)
        #expect(!"\(first)".contains("retr"), "\(first)")
    }

    @Test("cancel() during a backoff wait delivers the cancellation at once, via response(_:)")
    func cancelWhileWaiting() async throws {
        stub.stub(.get, "/slow", .status(.serviceUnavailable))
        let request = Flaky("https://api.example.com/slow", session: session, retry: .init(breakTime: .seconds(60)))
        let delivered = Delivered<Response<Data, BrickError>>()
        request.response { delivered.add($0) }.resume()
        await eventually { clock.waiterCount == 1 }
        request.cancel()
        let response = try await delivered.first()
        #expect(response.error == .cancelled)
        #expect(stub.requests.count == 1)
        #expect(delivered.count == 1)
    }

    @Test("cancel() during the backoff stops it even when the first attempt's transport completed before its start returned")
    func cancelWhenCompletedBeforeStartReturned() async throws {
        // The transport answers 503 inside `start` and returns its handle only once the retry's
        // backoff waits: the order a loaded machine produced under AddressSanitizer, where the
        // finished first transfer's handle replaced the backoff's and the cancel waited 60 s.
        let early = CompletesBeforeReturning(clock: clock)
        let session = Session(transport: early, reachability: reachability, clock: clock)
        let request = Flaky("https://api.example.com/slow", session: session, retry: .init(breakTime: .seconds(60)))
        let delivered = Delivered<Response<Data, BrickError>>()
        // From a thread of its own: `start` blocks the thread that resumes the request. (A component
        // is not Sendable; this thread is its only user until `returned`.)
        nonisolated(unsafe) let resumed = request
        Thread { resumed.response { delivered.add($0) }.resume() }.start()
        await eventually { early.returned.withLock { $0 } }
        request.cancel()
        let response = try await delivered.first()
        #expect(response.error == .cancelled)
        #expect(clock.now.offset == .zero, "the cancel ended the backoff, not the clock")
    }

    @Test("a POST with IdempotentRequestType retries with the same Idempotency-Key")
    func idempotencyKey() async throws {
        stub.stub(.post, "/orders", .status(.badGateway), .status(.created))
        let task = Task {
            await CreateOrder("https://api.example.com/orders", session: session, retry: .init(breakTime: .seconds(1)))
                .response()
        }
        await eventually { clock.waiterCount == 1 }
        clock.advance(by: .seconds(1))
        #expect(await task.childValue.status == .created)
        let keys = stub.requests.map { $0.head.headerFields[.idempotencyKey] }
        try #require(keys.count == 2)  // not #expect: indexing a shorter array would crash the test process
        #expect(keys[0] != nil && keys[0] == keys[1])
    }

    @Test("a POST without a key is not retried on a retryable status")
    func postNotRetried() async throws {
        stub.stub(.post, "/pay", .status(.serviceUnavailable))
        let response = await Flaky("https://api.example.com/pay", method: .post, session: session, retry: .init())
            .response()
        #expect(response.status == .serviceUnavailable)
        #expect(stub.requests.count == 1)
    }
}

@Suite("The session retries against the loopback server", .timeLimit(.minutes(2)))
struct LoopbackRetryTests {
    @Test("503, 503, 200 from a real server succeeds on attempt 3")
    func serviceUnavailable() async throws {
        try await withServer { server in
            let clock = ManualClock()
            let session = Session(clock: clock)
            server.script("/orders", [.status(503), .status(503), .ok("done")])
            let task = Task {
                await Flaky(server.baseURL + "/orders", session: session, retry: .init(breakTime: .seconds(2)))
                    .response()
            }
            for attempt in 1...2 {
                await eventually { clock.waiterCount == 1 && server.requests(path: "/orders").count == attempt }
                clock.advance(by: .seconds(2))
            }
            let response = await task.childValue
            #expect(response.data == Data("done".utf8))
            #expect(response.retryCount == 2)
            #expect(server.requests(path: "/orders").count == 3)
        }
    }

    @Test("429 with Retry-After from a real server is obeyed")
    func tooManyRequests() async throws {
        try await withServer { server in
            let clock = ManualClock()
            let session = Session(clock: clock)
            server.script("/limited", [.status(429, retryAfter: "7"), .ok("ok")])
            let task = Task {
                await Flaky(server.baseURL + "/limited", session: session, retry: .init(breakTime: .seconds(1)))
                    .response()
            }
            await eventually { clock.waiterCount == 1 }
            clock.advance(by: .seconds(6))
            #expect(server.requests(path: "/limited").count == 1)
            clock.advance(by: .seconds(1))
            #expect(await task.childValue.status == .ok)
        }
    }

    @Test("reset at the start: a GET is retried, a POST without a key is not (the server counts)")
    func resetAtStart() async throws {
        try await withServer { server in
            let clock = ManualClock()
            let session = Session(clock: clock)
            server.script("/get-me", [.resetBeforeResponse, .ok("second")])
            let get = Task {
                await Flaky(server.baseURL + "/get-me", session: session, retry: .init(breakTime: .seconds(1)))
                    .response()
            }
            await eventually { clock.waiterCount == 1 }
            clock.advance(by: .seconds(1))
            #expect(await get.childValue.data == Data("second".utf8))
            #expect(server.requests(path: "/get-me").count == 2)

            server.script("/post-me", [.resetBeforeResponse, .ok("second")])
            let post = await Flaky(
                server.baseURL + "/post-me",
                method: .post,
                session: session,
                retry: .init(breakTime: .seconds(1))
            ).response()
            #expect(post.error?.code == .connectionLost)
            #expect(server.requests(path: "/post-me").count == 1)
        }
    }

    @Test("connection refused is retried for any method: nothing was sent")
    func refusedThenUp() async throws {
        let first = try await BrickTestServer.start()
        let port = first.port
        await first.shutdown()
        let clock = ManualClock()
        let session = Session(clock: clock)
        let task = Task {
            await Flaky(
                "http://127.0.0.1:\(port)/post",
                method: .post,
                session: session,
                retry: .init(breakTime: .seconds(3))
            ).response()
        }
        await eventually { clock.waiterCount == 1 }
        let second = try await BrickTestServer.start(port: port)
        clock.advance(by: .seconds(3))
        let response = await task.childValue
        #expect(response.status == .ok)
        #expect(response.retryCount == 1)
        #expect(second.requests(path: "/post").count == 1)
        await second.shutdown()
    }
}
