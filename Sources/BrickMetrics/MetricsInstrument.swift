public import BrickRequest
public import CoreMetrics
import FoundationEssentials
import HTTPTypes
import Synchronization
import Glibc

/// Records a session's requests through swift-metrics, with OpenTelemetry's names for HTTP
/// clients. The library only emits; the process bootstraps a backend (Prometheus, OpenTelemetry)
/// with `MetricsSystem.bootstrap`.
///
/// ```swift
/// import BrickMetrics
/// let session = Session(instruments: [MetricsInstrument()])
/// ```
///
/// Per attempt (each request sent, retries included):
/// - `http.client.request.duration` (a `Timer`: seconds in OpenTelemetry and Prometheus
///   exporters), dimensions `http.request.method`, `server.address`, `server.port`,
///   `http.response.status_code` (when a response arrived), `error.type` (a `4xx`/`5xx` status,
///   or the transport error's kind), and `brick.operation` where the endpoint names one
///   (`BrickRequest.RequestType.operationName`);
/// - `http.client.request.body.size` and `http.client.response.body.size` (`Recorder`s: body
///   bytes sent, and received after decoding), dimensions `http.request.method`, `server.address`,
///   `server.port`;
/// - `brick.client.retries` (`Counter`): attempts after the first (retries, the replay after a
///   `401`, the attempt after parking), same dimensions;
/// - `brick.client.connections.opened` (`Counter`): attempts that had to open a connection
///   (none was free to reuse), dimensions `server.address`, `server.port`.
///
/// Per request: `brick.client.parked` (`Counter`) when a request waits for the network to come
/// back, and `brick.client.cache.requests` (`Counter`) with `brick.cache.result` = `hit`, `miss`,
/// `revalidated` or `fallback` for `BrickRequest.CachedResponseType` endpoints; both with
/// `server.address`, `server.port`.
///
/// With no backend bootstrapped, a request costs nothing more: the instrument declines it. Having
/// found none, it looks again at most once a second (reading the process's factory takes a lock):
/// bootstrap the backend before the first request, as swift-metrics asks, or its metrics start
/// within a second of `MetricsSystem.bootstrap`.
public struct MetricsInstrument: RequestInstrument {
    private let factory: (any MetricsFactory)?

    /// Creates the instrument.
    ///
    /// - Parameter factory: Where metrics go; `nil` (the default) for the process's
    ///   (`MetricsSystem.factory`), read when each request begins (see above for a process that
    ///   has none yet).
    public init(factory: (any MetricsFactory)? = nil) {
        self.factory = factory
        hasOwnFactory = factory != nil
    }

    /// Whether ``factory`` is set: asked without copying the existential out.
    private let hasOwnFactory: Bool

    /// Observes a request when a backend is at work; otherwise declines it.
    public func observe(_ request: TransportRequest, operation: String?) -> (any RequestObserver)? {
        guard hasOwnFactory else {
            guard let process = ProcessFactory.current() else { return nil }
            return RequestMetrics(factory: process, request: request, operation: operation)
        }
        // A type comparison, not a cast: this runs for every request.
        guard let factory, ObjectIdentifier(type(of: factory)) != ObjectIdentifier(NOOPMetricsHandler.self) else { return nil }
        return RequestMetrics(factory: factory, request: request, operation: operation)
    }
}

/// The process's metrics factory as instruments read it: `nil` while none is bootstrapped — a
/// verdict kept for a second (on the coarse monotonic clock: a few nanoseconds to read), so that
/// an application that exports nothing pays no lock per request. A bootstrapped factory is read
/// each time (`MetricsSystem.bootstrap` happens once; the read is then the backend's cost anyway).
enum ProcessFactory {
    /// Until when (coarse monotonic nanoseconds) the process is known to have no backend; 0: unknown.
    private static let noneUntil = Atomic<UInt64>(0)
    /// How long a "none" verdict is kept.
    static let recheckNanoseconds: UInt64 = 1_000_000_000

    static func current() -> (any MetricsFactory)? {
        let now = coarseNanoseconds()
        if now < noneUntil.load(ordering: .relaxed) { return nil }
        let factory = MetricsSystem.factory
        guard ObjectIdentifier(type(of: factory)) != ObjectIdentifier(NOOPMetricsHandler.self) else {
            noneUntil.store(now + recheckNanoseconds, ordering: .relaxed)
            return nil
        }
        return factory
    }

    private static func coarseNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

/// The metrics of one request.
private final class RequestMetrics: RequestObserver {
    let factory: any MetricsFactory
    /// `server.address`, `server.port`.
    let destination: [(String, String)]
    let method: String
    let operation: String?
    /// When the attempt under way started (attempts never overlap).
    private let started = MetricsClock()

    init(factory: any MetricsFactory, request: TransportRequest, operation: String?) {
        self.factory = factory
        self.destination = [("server.address", request.host), ("server.port", String(request.port))]
        self.method = request.method.rawValue
        self.operation = operation
    }

    func attemptWillStart(_ request: inout TransportRequest, resendCount: Int) {
        if resendCount > 0 {
            Counter(label: "brick.client.retries", dimensions: [("http.request.method", method)] + destination, factory: factory)
                .increment()
        }
        started.reset()
    }

    func attemptDidEnd(
        _ result: Result<TransportResponse, TransportError>,
        request: TransportRequest,
        resendCount: Int
    ) {
        let elapsed = started.elapsedNanoseconds
        var dimensions = [("http.request.method", method)] + destination
        let sizes = dimensions
        switch result {
        case .success(let response):
            let code = response.status.code
            dimensions.append(("http.response.status_code", String(code)))
            if code >= 400 { dimensions.append(("error.type", String(code))) }
            let metrics = response.metrics
            Recorder(label: "http.client.request.body.size", dimensions: sizes, factory: factory)
                .record(metrics.bytesSent)
            Recorder(label: "http.client.response.body.size", dimensions: sizes, factory: factory)
                .record(metrics.bytesReceived)
            if !metrics.connectionReused {
                Counter(label: "brick.client.connections.opened", dimensions: destination, factory: factory).increment()
            }
        case .failure(let error):
            dimensions.append(("error.type", error.kind.description))
        }
        if let operation { dimensions.append(("brick.operation", operation)) }
        Timer(label: "http.client.request.duration", dimensions: dimensions, factory: factory)
            .recordNanoseconds(elapsed)
    }

    func requestDidPark() {
        Counter(label: "brick.client.parked", dimensions: destination, factory: factory).increment()
    }

    func cacheDidAnswer(_ answer: CacheAnswer) {
        Counter(
            label: "brick.client.cache.requests",
            dimensions: [("brick.cache.result", answer.rawValue)] + destination,
            factory: factory
        ).increment()
    }
}

/// The start of the attempt under way, on the monotonic clock.
private final class MetricsClock: Sendable {
    private let start = Lock(ContinuousClock.now)

    func reset() { start.withLock { $0 = .now } }

    var elapsedNanoseconds: Int64 {
        let elapsed = start.withLock { ContinuousClock.now - $0 }
        return elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
    }
}
