// What `import BrickRequest` gives: the core (bricks, sessions, retries, the cache rules, traffic
// control, the `Transport` seam — no C import), the curl transport and netlink reachability, and
// the defaults that join them: `Session(configuration:)` on a `CurlTransport`, `Session.shared`,
// and the `session` of endpoints that do not choose one.
@_exported public import BrickRequestCore
@_spi(Tuning) @_spi(TransportImplementation) @_exported public import BrickRequestCore
@_exported public import BrickCurl
@_spi(Tuning) @_exported public import BrickCurl
@_exported public import BrickNetlink
public import Logging

extension Session {
    /// Creates a session on the curl transport.
    ///
    /// ```swift
    /// extension Session {
    ///     static let api = Session(configuration: .init(defaultHeaders: ["Accept": "application/json"]))
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - configuration: Headers, timeouts, limits, TLS, proxy, redirects, callback queue.
    ///   - transport: The transport; by default a `CurlTransport` built from
    ///     ``Session/Configuration/transport`` (with the configuration's
    ///     ``Session/Configuration/sensitiveHeaders`` added to its redirect policy's).
    ///   - reachability: When destinations are reachable; parked requests wait for it. Default
    ///     `NetlinkReachability.shared` (``AlwaysReachable`` where netlink is unavailable).
    ///   - clock: The clock retry delays run on (a `ManualClock` in tests). Default `ContinuousClock`.
    ///   - logger: Where events are logged.
    ///   - eventMonitors: Observers of every request.
    ///   - instruments: What instruments every request attempt by attempt (`MetricsInstrument`
    ///     of `BrickMetrics`, `TracingInstrument` of `BrickTracing`). Default none.
    public convenience init(
        configuration: Configuration = Configuration(),
        transport: (any Transport)? = nil,
        reachability: (any ReachabilityMonitor)? = nil,
        clock: some Clock<Duration> = ContinuousClock(),
        logger: Logger = Logger(label: "BrickRequest.Session"),
        eventMonitors: [any EventMonitor] = [],
        instruments: [any RequestInstrument] = []
    ) {
        self.init(
            configuration: configuration,
            transport: transport ?? CurlTransport(configuration: configuration.transportForCurl),
            reachability: reachability ?? NetlinkReachability.shared ?? AlwaysReachable(),
            clock: clock,
            logger: logger,
            eventMonitors: eventMonitors,
            instruments: instruments
        )
    }

    /// The session used by requests that do not choose one: the curl transport with the default
    /// configuration.
    public static let shared = Session()

    /// The `curl` command equivalent to a request of this session, when its transport is a
    /// `CurlTransport`; otherwise a description of the rendered request.
    ///
    /// - Parameter request: An endpoint.
    /// - Returns: The command, or the rendering error's description.
    public func cURLDescription(for request: some RequestType) -> String {
        do {
            let rendered = try RequestRenderer.render(request, session: self)
            if let curl = transport as? CurlTransport { return curl.cURLDescription(for: rendered) }
            return "\(rendered.method) \(rendered.urlString)"
        } catch {
            return "\(error)"
        }
    }
}

extension Session.Configuration {
    /// ``transport`` with ``sensitiveHeaders`` added to its redirect policy's.
    var transportForCurl: TransportConfiguration {
        var transport = self.transport
        transport.redirects.sensitiveHeaders.formUnion(sensitiveHeaders)
        return transport
    }
}

extension RequestType {
    /// ``Session/shared``.
    public var session: Session { Session.shared }
}

extension SessionRequestType {
    /// ``Session/shared``.
    public var session: Session { Session.shared }
}
