import BrickMetrics
import BrickTestSupport
import BrickRequest
import BrickTestServer
import BrickTesting
import CoreMetrics
import Foundation
import MetricsTestKit
import Testing

/// A cached endpoint of the test server's `/cache/` route.
final class CachedThing: Component, GETRequestType, DataResponseType, CachedResponseType {
    let urlString: String
    let session: Session
    let cachePolicy: CachePolicy
    var autoRetryConfiguration: AutoRetryConfiguration { .none }
    init(_ url: String, session: Session, policy: CachePolicy = .http) {
        self.urlString = url
        self.session = session
        self.cachePolicy = policy
        super.init()
    }
}

@Suite("Metrics: OpenTelemetry's HTTP client names, retries, parking, the cache", .timeLimit(.minutes(3)))
struct MetricsInstrumentTests {
    @Test("each attempt: duration with method, address, port, status and error.type; body sizes; retries; connections")
    func attempts() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.script("/flaky", [.status(503), .ok("fine")])
        let metrics = TestMetrics()
        let session = Session(instruments: [MetricsInstrument(factory: metrics)])
        let response = await Traced(server.baseURL + "/flaky", session: session, operation: "GetFlaky").response()
        #expect(response.status == .ok)
        let base = [
            ("http.request.method", "GET"), ("server.address", "127.0.0.1"), ("server.port", String(server.port)),
        ]
        let failed = try metrics.expectTimer(
            "http.client.request.duration",
            base + [("http.response.status_code", "503"), ("error.type", "503"), ("brick.operation", "GetFlaky")]
        )
        let succeeded = try metrics.expectTimer(
            "http.client.request.duration",
            base + [("http.response.status_code", "200"), ("brick.operation", "GetFlaky")]
        )
        #expect(failed.values.count == 1 && succeeded.values.count == 1)
        #expect(failed.values[0] > 0 && succeeded.values[0] > 0)
        #expect(try metrics.expectCounter("brick.client.retries", base).totalValue == 1)
        let received = try metrics.expectRecorder("http.client.response.body.size", base)
        #expect(received.values.count == 2 && received.values.last == 4)  // "fine"
        #expect(try metrics.expectRecorder("http.client.request.body.size", base).values.allSatisfy { $0 == 0 })
        let opened = try metrics.expectCounter(
            "brick.client.connections.opened",
            [("server.address", "127.0.0.1"), ("server.port", String(server.port))]
        )
        #expect(opened.totalValue == Int64(server.connectionCount))
    }

    @Test("a transport failure: error.type is the failure's kind, no status")
    func failure() async throws {
        let server = try await BrickTestServer.start()
        let url = server.baseURL + "/get"
        let port = server.port
        await server.shutdown()
        let metrics = TestMetrics()
        let session = Session(instruments: [MetricsInstrument(factory: metrics)])
        _ = await Traced(url, session: session, retries: 0).response()
        let timer = try metrics.expectTimer(
            "http.client.request.duration",
            [
                ("http.request.method", "GET"), ("server.address", "127.0.0.1"), ("server.port", String(port)),
                ("error.type", "cannotConnect"),
            ]
        )
        #expect(timer.values.count == 1)
    }

    @Test("the cache: miss, hit, revalidated, fallback")
    func cacheAnswers() async throws {
        let server = try await BrickTestServer.start()
        let metrics = TestMetrics()
        let session = Session(instruments: [MetricsInstrument(factory: metrics)])
        let destination = [("server.address", "127.0.0.1"), ("server.port", String(server.port))]
        func count(_ result: String) -> Int64 {
            metrics.counterTotal(label: "brick.client.cache.requests", dimensions: [("brick.cache.result", result)] + destination)
        }
        let fresh = server.baseURL + "/cache/fresh?max_age=60"
        _ = try await CachedThing(fresh, session: session).value
        _ = try await CachedThing(fresh, session: session).value
        #expect(count("miss") == 1 && count("hit") == 1)
        let revalidated = server.baseURL + "/cache/always?cc=no-cache"
        _ = try await CachedThing(revalidated, session: session).value
        _ = try await CachedThing(revalidated, session: session).value
        #expect(count("miss") == 2 && count("revalidated") == 1)
        let fallback = server.baseURL + "/cache/fallback?max_age=0"
        _ = try await CachedThing(fallback, session: session, policy: .networkElseCache).value
        await server.shutdown()
        let response = await CachedThing(fallback, session: session, policy: .networkElseCache).response()
        #expect(response.source == .cache && response.error == nil)
        #expect(count("fallback") == 1 && count("miss") == 3 && count("hit") == 1)
    }

    @Test("a parked request is counted once, when it parks")
    func parked() async throws {
        let stub = StubTransport()
        let reachability = ManualReachability(.unreachable)
        let metrics = TestMetrics()
        let session = Session(
            transport: stub,
            reachability: reachability,
            clock: ImmediateClock(),
            instruments: [MetricsInstrument(factory: metrics)]
        )
        stub.stub(.get, "/feed", .failure(.notConnected), .status(.ok))
        let watchers = reachability.subscriberCount
        let task = Task { await Traced("https://api.example.com/feed", session: session, retries: 1).response() }
        while reachability.subscriberCount == watchers { await Task.yield() }
        let destination = [("server.address", "api.example.com"), ("server.port", "443")]
        #expect(metrics.counterTotal(label: "brick.client.parked", dimensions: destination) == 1)
        reachability.set(.reachable)
        #expect(await task.childValue.status == .ok)
        #expect(try metrics.expectCounter("brick.client.retries", [("http.request.method", "GET")] + destination).totalValue == 1)
    }

    @Test("with no backend, the instrument declines every request")
    func noBackend() throws {
        let request = try TransportRequest(method: .get, url: "http://127.0.0.1:1/")
        #expect(MetricsInstrument().observe(request, operation: nil) == nil)
        #expect(MetricsInstrument(factory: NOOPMetricsHandler.instance).observe(request, operation: nil) == nil)
    }
}

/// `MetricsInstrument()` with the process's factory, bootstrapped late, in a process of its own
/// (`MetricsSystem.bootstrap` is once per process and would reach every other test of this one).
@Suite("Metrics: a backend bootstrapped after the first requests", .timeLimit(.minutes(3)))
struct LateBootstrapTests {
    /// `brick-metrics-probe`, built next to the test binary by `swift test`.
    static var probePath: String { Subprocess.sibling("brick-metrics-probe") }

    @Test("requests made after MetricsSystem.bootstrap are recorded within about a second (the instrument's 'no backend' verdict lasts a second)")
    func lateBootstrapIsSeen() async throws {
        let output = try await Subprocess.run("'\(Self.probePath)'")
        let fields = Dictionary(
            output.split(whereSeparator: \.isWhitespace).compactMap { field -> (String, Int)? in
                let parts = field.split(separator: "=")
                guard parts.count == 2, let value = Int(parts[1]) else { return nil }
                return (String(parts[0]), value)
            },
            uniquingKeysWith: { _, last in last }
        )
        #expect(fields["recorded_before"] == 0, "\(output)")
        let seenAfter = try #require(fields["seen_after_ms"], "\(output)")
        #expect(seenAfter >= 0, "never recorded: \(output)")
        // One second of verdict, then the next request is recorded (1,001 ms on a quiet machine);
        // the margin is for a loaded one: what fails here is a verdict that is never looked at again.
        #expect(seenAfter <= 5_000, "\(output)")
    }
}
