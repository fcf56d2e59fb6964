import FoundationEssentials
public import Logging
import Synchronization

/// Runs requests: renders nothing itself (endpoints render on the caller's side), hands them to its
/// ``Transport``, validates and serializes the responses, and delivers them.
///
/// ```swift
/// extension Session {
///     static let api = Session(configuration: .init(defaultHeaders: ["Accept": "application/json"]))
/// }
/// ```
///
/// A session is `Sendable` and cheap to share; use one per API (its connections are pooled).
/// In tests, build one on `BrickTesting`'s `StubTransport` with `Session.testing(…)`.
public final class Session: Sendable {
    /// The session's configuration.
    public let configuration: Configuration
    /// The transport that sends the requests.
    public let transport: any Transport
    /// Where the session logs, following swift-log's rules for libraries: nothing above `info` in
    /// normal operation. `debug`: each request's start, end and failure (URLs without their query),
    /// retries, held-back requests; `info`: traffic control's changes of a host (paused, breaker
    /// opened…); `warning`: a response cache that cannot read or write, `resume()` on a request that
    /// already ran. Failures reach the caller as errors; the log only adds detail for those who ask.
    ///
    /// A `Logger` is a value: give the session the one you want, with its level.
    ///
    /// ```swift
    /// var logger = Logger(label: "app.api")
    /// logger.logLevel = .debug                      // every request; `.warning` quiets the rest
    /// let session = Session(logger: logger)
    /// ```
    ///
    /// Its level is read once, when the session is created (log handlers are values, so it cannot
    /// change afterwards without a new `Logger`): asking the handler on every request costs more
    /// than the rest of the log call.
    public let logger: Logger
    /// Whether ``logger`` takes `debug` messages: the per-request events.
    let logsRequests: Bool
    /// Observers of every request.
    public let eventMonitors: [any EventMonitor]
    /// What instruments every request attempt by attempt: metrics, tracing
    /// (``RequestInstrument``).
    public let instruments: [any RequestInstrument]
    /// Tells the retry engine when destinations become reachable again.
    public let reachability: any ReachabilityMonitor
    let callbacks: CallbackDispatcher
    package let clock: SessionClock
    /// The requests running now.
    let running = RunningRequests()
    /// ``transport``, when it resumes awaiting tasks at its own safe point.
    let resuming: (any ResumingTransport)?
    /// Stored responses being revalidated in the background (`stale-while-revalidate`), so that
    /// each is revalidated once at a time.
    let backgroundRevalidations = Lock(Set<String>())
    /// Host policies and what the session learned of each host (``Configuration/hostPolicies``).
    package let traffic: TrafficControl
    /// Forwards the monitor's changes to the transport (``Transport/networkDidChange()``).
    private let networkWatcher: Task<Void, Never>

    /// Creates a session on a transport.
    ///
    /// `import BrickRequest` adds the form most code uses, `Session(configuration:)`, which makes
    /// the curl transport from ``Configuration/transport`` and watches the kernel's routes; this one
    /// takes both, for a transport of your own (or `BrickTesting`'s `StubTransport`).
    ///
    /// - Parameters:
    ///   - configuration: Headers, timeouts, limits, TLS, proxy, redirects, callback queue.
    ///   - transport: The transport that sends the requests.
    ///   - reachability: When destinations are reachable; parked requests wait for it
    ///     (``AlwaysReachable`` when nothing tells).
    ///   - clock: The clock retry delays run on (a `ManualClock` in tests). Default `ContinuousClock`.
    ///   - logger: Where events are logged.
    ///   - eventMonitors: Observers of every request.
    ///   - instruments: What instruments every request attempt by attempt (`MetricsInstrument`
    ///     of `BrickMetrics`, `TracingInstrument` of `BrickTracing`). Default none.
    public convenience init(
        configuration: Configuration = Configuration(),
        transport: any Transport,
        reachability: any ReachabilityMonitor,
        clock: some Clock<Duration> = ContinuousClock(),
        logger: Logger = Logger(label: "BrickRequest.Session"),
        eventMonitors: [any EventMonitor] = [],
        instruments: [any RequestInstrument] = []
    ) {
        self.init(
            configuration: configuration,
            transport: transport,
            reachability: reachability,
            sessionClock: SessionClock(clock),
            logger: logger,
            eventMonitors: eventMonitors,
            instruments: instruments
        )
    }

    /// The designated initializer, on a clock already wrapped (a session made from another shares
    /// its clock).
    init(
        configuration: Configuration,
        transport: any Transport,
        reachability: any ReachabilityMonitor,
        sessionClock clock: SessionClock,
        logger: Logger,
        eventMonitors: [any EventMonitor],
        instruments: [any RequestInstrument]
    ) {
        self.configuration = configuration
        self.transport = transport
        self.reachability = reachability
        self.clock = clock
        self.logger = logger
        self.logsRequests = logger.logLevel <= .debug
        self.eventMonitors = eventMonitors
        self.instruments = instruments
        self.callbacks = CallbackDispatcher(configuration.callbackQueue, transport: transport)
        self.resuming = transport as? any ResumingTransport
        self.traffic = TrafficControl(policies: configuration.hostPolicies, clock: self.clock) {
            [logger, eventMonitors] event in
            logger.info("traffic control: \(event)", metadata: ["server.address": "\(event.host)"])
            for monitor in eventMonitors { monitor.trafficDidChange(event) }
        }
        let changes = reachability.changes()
        self.networkWatcher = Task {
            for await _ in changes { transport.networkDidChange() }
        }
    }

    deinit {
        networkWatcher.cancel()
    }

    /// An executor for tasks that run this session's requests: awaiting `value` or `response()`
    /// there resumes after each response with no thread hop (its transport's
    /// the transport's preferred executor; `nil`, meaning no preference, when it has none).
    ///
    /// ```swift
    /// try await withThrowingTaskGroup(of: User.self) { group in
    ///     for id in ids {
    ///         group.addTask(executorPreference: Session.api.preferredTaskExecutor) {
    ///             try await GetUser(userID: id).value
    ///         }
    ///     }
    ///     …
    /// }
    /// ```
    public var preferredTaskExecutor: (any TaskExecutor)? {
        (transport as? any ThreadedTransport)?.preferredTaskExecutor
    }

    /// How many requests this session runs now: begun (by `resume()`, `response()`, `value`, …)
    /// and not yet completed or cancelled, retry waits and requests parked until the network
    /// returns included.
    public var runningRequests: Int { running.count }

    /// Cancels every request this session runs now; each delivers ``BrickError/cancelled`` to its
    /// handler or awaiting caller, as ``RequestType/cancel()`` does. Requests started afterwards
    /// run normally.
    public func cancelAll() {
        for lifecycle in running.all { lifecycle.cancel() }
    }

}

extension Session {
    /// Settings of a ``Session``.
    public struct Configuration: Sendable {
        /// Header fields sent with every request (a request's own ``RequestType/headers`` win).
        public var defaultHeaders: [String: String]
        /// Transport settings: timeouts, connection limits, HTTP version, TLS, proxy, redirects,
        /// maximum response size, decompression.
        public var transport: TransportConfiguration
        /// Where `response(_:)` handlers run. Default: a private serial queue per session, drained on
        /// the transport's thread when the transport allows it (``CallbackQueue/serial(label:)``).
        public var callbackQueue: CallbackQueue
        /// Sends every request to this origin (`scheme://host:port`) instead of its URL's, keeping
        /// path and query: for staging environments and tests. Default `nil`.
        public var originOverride: String?
        /// How the session treats each host: rate, concurrency, what it learns from `429`/`503`,
        /// circuit breaker, retry budget. Default ``HostPolicy/standard`` for every host (see it
        /// for what that means and why).
        public var hostPolicies: HostPolicies
        /// The cache of ``CachedResponseType`` endpoints that do not name their own. Default an
        /// ``InMemoryResponseCache`` of 32 MiB, made with the configuration (each configuration
        /// value made by `init` has its own).
        public var responseCache: any ResponseCache
        /// Header names that carry credentials besides `Authorization`, `Cookie` and
        /// `Proxy-Authorization` (an `X-Api-Key`): dropped on a redirect that leaves the origin
        /// (with the curl transport a session makes), and refused by every offline queue on this
        /// session, as the three are. Default none.
        public var sensitiveHeaders: Set<String>
        /// Which addresses the session's requests may reach: ``EgressPolicy/unrestricted`` by
        /// default; ``EgressPolicy/publicInternetOnly`` for a session that sends to URLs other
        /// people give it (webhooks). An endpoint's ``RequestType/egressPolicy`` wins, and the
        /// offline queues deliver under their session's.
        public var egressPolicy: EgressPolicy = .unrestricted

        /// Creates a configuration.
        ///
        /// - Parameters:
        ///   - defaultHeaders: Header fields for every request.
        ///   - transport: Transport settings.
        ///   - callbackQueue: Where handlers run.
        ///   - originOverride: An origin that replaces every request's.
        ///   - responseCache: The cache of ``CachedResponseType`` endpoints; `nil` for a new
        ///     ``InMemoryResponseCache`` of 32 MiB.
        ///   - hostPolicies: How each host is treated (rate, concurrency, `429`, breaker, budget).
        ///   - sensitiveHeaders: More credential header names (dropped on cross-origin redirects,
        ///     never stored by offline queues).
        public init(
            defaultHeaders: [String: String] = [:],
            transport: TransportConfiguration = TransportConfiguration(),
            callbackQueue: CallbackQueue = .serial(),
            originOverride: String? = nil,
            responseCache: (any ResponseCache)? = nil,
            hostPolicies: HostPolicies = HostPolicies(),
            sensitiveHeaders: Set<String> = []
        ) {
            self.sensitiveHeaders = sensitiveHeaders
            self.hostPolicies = hostPolicies
            self.responseCache = responseCache ?? InMemoryResponseCache()
            self.defaultHeaders = defaultHeaders
            self.transport = transport
            self.callbackQueue = callbackQueue
            self.originOverride = originOverride
        }
    }
}
