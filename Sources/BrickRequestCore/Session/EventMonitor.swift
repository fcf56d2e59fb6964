/// Observes the requests of a ``Session``: for logging, metrics or tests.
///
/// Every method has an empty default. Methods are called on whichever thread the event happens on,
/// so implementations must be thread-safe and quick.
public protocol EventMonitor: Sendable {
    /// A request was rendered and handed to the transport.
    ///
    /// - Parameter request: The rendered request.
    func requestDidStart(_ request: TransportRequest)
    /// The transport finished a request (any status, or a transport error).
    ///
    /// - Parameters:
    ///   - request: The rendered request.
    ///   - result: The transport's outcome.
    func request(_ request: TransportRequest, didCompleteWith result: Result<TransportResponse, TransportError>)
    /// A request could not be rendered (invalid URL, header or body).
    ///
    /// - Parameter error: Why.
    func requestDidFailToRender(_ error: BrickError)
    /// How the session treats a host changed: paused, rate lowered or restored, circuit breaker
    /// opened, half-open or closed, retry budget exhausted.
    ///
    /// - Parameter event: The change.
    func trafficDidChange(_ event: TrafficEvent)
}

extension EventMonitor {
    /// Does nothing.
    public func requestDidStart(_ request: TransportRequest) {}
    /// Does nothing.
    public func request(_ request: TransportRequest, didCompleteWith result: Result<TransportResponse, TransportError>)
    {}
    /// Does nothing.
    public func requestDidFailToRender(_ error: BrickError) {}
    /// Does nothing.
    public func trafficDidChange(_ event: TrafficEvent) {}
}
