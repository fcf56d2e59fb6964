import FoundationEssentials
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The libcurl transport: one driver thread, one `curl_multi` handle, many concurrent requests.
///
/// Connections are kept alive and reused; HTTP/2 is negotiated over TLS and multiplexed; easy
/// handles are pooled and reset between requests. Completions run on the driver thread: keep them
/// short. Longer work goes through `scheduleOnTransportThread(_:)` (which a ``Session`` uses
/// for its handlers) or ``taskExecutor``: it runs on the driver's thread too, and a standby thread
/// takes the I/O over if it runs longer than `stallLimit`.
///
/// ```swift
/// let transport = CurlTransport()
/// let request = try TransportRequest(method: .get, url: "http://127.0.0.1:8080/anything")
/// let response = try await transport.send(request)
/// ```
///
/// When the last reference to a transport goes away, its driver thread stops and every request
/// still in flight fails with ``TransportError/Kind/shutdown``.
public final class CurlTransport: ThreadedTransport, ResumingTransport {
    private let driver: CurlDriver
    /// The continuations of tasks awaiting this transport, resumed at the driver's safe point.
    private let resumptions: ResumptionBatch
    /// The configuration the transport was created with.
    public let configuration: Configuration
    /// An executor that runs tasks on the transport's driver thread, between rounds of I/O.
    ///
    /// A task that prefers it runs there for its whole life: it resumes after each response with no
    /// thread hop, and the requests it starts need no wakeup. (An ordinary task awaiting a
    /// ``Session``'s response gets the same up to its next suspension:
    /// `resumesTasksAtSafePoint`; preferring this executor also spares the hops
    /// around its other `await`s.)
    ///
    /// ```swift
    /// try await withThrowingTaskGroup(of: Void.self) { group in
    ///     for id in ids {
    ///         group.addTask(executorPreference: transport.taskExecutor) {
    ///             _ = try await GetUser(userID: id).value
    ///         }
    ///     }
    ///     try await group.waitForAll()
    /// }
    /// ```
    ///
    /// While such a task runs, the transport's I/O waits; if it runs longer than
    /// `stallLimit`, a standby thread takes the I/O over (so a blocking task costs
    /// other requests at most about two limits). Jobs are not serialized: after a takeover, a job
    /// may run on the new driver thread while a long one finishes on the old. Keep the transport
    /// alive while tasks prefer it; after it shuts down their jobs run on the global concurrent
    /// executor.
    public let taskExecutor: any TaskExecutor

    /// ``taskExecutor``.
    package var preferredTaskExecutor: (any TaskExecutor)? { taskExecutor }

    /// Creates a transport and starts its driver thread.
    ///
    /// - Parameter configuration: Timeouts, limits, TLS, proxy, redirects and decoding.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.driver = CurlDriver(
            configuration: configuration,
            proxy: ResolvedProxy(configuration.proxy, environment: ProcessInfo.processInfo.environment)
        )
        self.taskExecutor = driver.executor!
        self.resumptions = ResumptionBatch(driver: driver)
    }

    deinit {
        driver.submit(.shutdown)
    }

    /// Starts a request; `completion` runs once on the driver thread.
    ///
    /// - Parameters:
    ///   - request: The rendered request.
    ///   - completion: Receives the response or a ``TransportError``.
    /// - Returns: A handle that cancels the request; cancelling frees its curl handle at once.
    public func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        let transfer = Transfer(request: request, driver: driver, completion: completion)
        driver.submit(.start(transfer))
        // The closure's only capture is the transfer, which then serves as its context: no allocation.
        return TransportTask { [transfer] in transfer.cancel() }
    }

    /// Stops reusing the connections opened so far: transfers started in the next 2 seconds open
    /// new connections, later ones refuse any connection older than the change (each old connection
    /// is closed when a transfer would have reused it). The window ends after 2 minutes, when
    /// libcurl's idle limit has retired every connection left idle since the change.
    public func networkDidChange() {
        driver.submit(.networkChanged)
    }

    /// The cookies the transport holds, with `Configuration.storesCookies` (none otherwise),
    /// expired ones excluded, in no particular order.
    ///
    /// - Returns: The cookies.
    public func cookies() async -> [Cookie] {
        let lines = await withCheckedContinuation { (continuation: CheckedContinuation<[String], Never>) in
            driver.submit(.cookies(.list { continuation.resume(returning: $0) }))
        }
        let now = Date()
        return lines.compactMap(Cookie.init(netscapeLine:)).filter { cookie in
            cookie.expires.map { $0 > now } ?? true
        }
    }

    /// The connections of one destination (``connectionCounts()``).
    public struct HostConnections: Sendable, Hashable {
        /// The host, as the requests named it.
        public var host: String
        /// The port.
        public var port: Int
        /// Connections open now (connecting ones included).
        public var open: Int
        /// Open connections that carry no transfer now: kept for reuse.
        public var idle: Int
    }

    /// The transport's open connections by destination, and how many are idle (kept for reuse).
    /// Read on the transport's thread between two rounds of I/O; nothing is counted per request.
    /// Idle connections are counted as HTTP/1.1 uses them (each transfer under way holds one); an
    /// HTTP/2 connection carrying several streams makes the idle count low.
    ///
    /// - Returns: One entry per destination with an open connection, sorted by host and port.
    public func connectionCounts() async -> [HostConnections] {
        await withCheckedContinuation { (continuation: CheckedContinuation<[HostConnections], Never>) in
            driver.submit(.connectionCounts { continuation.resume(returning: $0) })
        }
    }

    /// Forgets every cookie the transport holds (a logout); later requests send none until a
    /// server sets new ones.
    public func removeAllCookies() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            driver.submit(.cookies(.removeAll { continuation.resume() }))
        }
    }

    /// Runs `work` on the driver's thread at its next safe point (before it waits for I/O again),
    /// when called inside a completion; `false` elsewhere or when
    /// `stallLimit` is zero. If `work` runs longer than the stall limit, a
    /// standby thread takes the I/O over, so `work` may block.
    ///
    /// - Parameter work: What to run.
    /// - Returns: Whether the driver took `work`.
    package func scheduleOnTransportThread(_ work: @escaping @Sendable () -> Void) -> Bool {
        driver.scheduleAtSafePoint(.work(work))
    }

    package func resume(
        _ continuation: UnsafeContinuation<Result<TransportResponse, TransportError>, Never>,
        with result: Result<TransportResponse, TransportError>
    ) {
        resumptions.resume(continuation, with: result)
    }

    /// Requests in flight (started and not yet completed). For tests and diagnostics.
    package var activeTransferCount: Int { driver.statistics.activeTransfers.load(ordering: .relaxed) }

    /// How many times a standby thread took the I/O over from work that ran longer than
    /// `stallLimit`: a count that grows means handlers (or tasks on the transport's
    /// executor) block the transport thread. Worth exporting as a metric.
    @_spi(Tuning) public var stallTakeoverCount: Int { driver.statistics.takeovers.load(ordering: .relaxed) }

    /// Whether tasks awaiting this transport go on at its safe point: asked for with
    /// `resumesTasksAtSafePoint` and the runtime hook installed (`false` when
    /// another hook was there first, or on a toolchain it was not tested with).
    @_spi(Tuning) public var capturesResumedTasks: Bool { driver.capturesResumedTasks }

    /// libcurl easy handles alive (in flight plus pooled for reuse). For tests and diagnostics.
    package var easyHandleCount: Int { driver.statistics.easyHandles.load(ordering: .relaxed) }
}
