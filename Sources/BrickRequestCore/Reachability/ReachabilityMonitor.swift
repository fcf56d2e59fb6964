/// Whether a destination can be reached right now.
public enum ReachabilityStatus: Sendable, Hashable {
    /// There is a route to it through an interface that is up and running.
    case reachable
    /// There is no usable route: requests would fail at once.
    case unreachable
    /// Not known (no monitor, or it has not looked yet).
    case unknown
}

/// Tells the ``Session`` when destinations become reachable, so the retry engine can park requests
/// while the network is down and release them when it returns.
///
/// Reachability decides *when* to retry, never whether to send: a first attempt is made whatever the
/// status, unless ``AutoRetryConfiguration/failWhenNotReachable`` is set.
///
/// Implementations: `BrickTesting`'s `ManualReachability` for tests, ``AlwaysReachable`` as the default.
public protocol ReachabilityMonitor: Sendable {
    /// The current status of a destination host.
    ///
    /// Called from any thread, and only where the answer matters: on the transport's own thread
    /// as a failure that means "no network" arrives (so that the retry engine judges it by the
    /// network the attempt met), while a parked request waits for a route, and before a first
    /// attempt when `failWhenNotReachable` is set. Responses and other failures (a `503`, a
    /// timeout) cost no lookup. Answer quickly and never block.
    ///
    /// - Parameter host: A host name or IP address.
    /// - Returns: The status.
    func status(for host: String) -> ReachabilityStatus

    /// A stream that yields whenever the status of some destination may have changed. Each call
    /// returns a new subscription; it ends when the caller stops iterating or is cancelled.
    ///
    /// - Returns: The stream of change notifications.
    func changes() -> AsyncStream<Void>
}

/// A monitor that reports every destination as reachable and never changes: with it, parked requests
/// are retried at once (a failure of the offline class then behaves like any retryable failure).
public struct AlwaysReachable: ReachabilityMonitor {
    /// Creates the monitor.
    public init() {}
    /// ``ReachabilityStatus/reachable``.
    public func status(for host: String) -> ReachabilityStatus { .reachable }
    /// A stream that never yields.
    public func changes() -> AsyncStream<Void> { AsyncStream { _ in } }
}
