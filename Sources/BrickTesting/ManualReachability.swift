import BrickRequest
import FoundationEssentials
import Synchronization

/// A `ReachabilityMonitor` a test drives by hand: `set(.unreachable)`, then `set(.reachable)`.
///
/// Every destination shares one status unless a host is given its own with `set(_:for:)`.
public final class ManualReachability: ReachabilityMonitor {
    private struct State {
        var status: ReachabilityStatus
        var hosts: [String: ReachabilityStatus] = [:]
    }

    private let state: Lock<State>
    private let subscribers = ReachabilityChanges()

    /// Creates a monitor.
    ///
    /// - Parameter status: The initial status of every destination.
    public init(_ status: ReachabilityStatus = .reachable) {
        state = Lock(State(status: status))
    }

    /// Changes the status of every destination (or of one host) and notifies subscribers.
    ///
    /// - Parameters:
    ///   - status: The new status.
    ///   - host: One host, or `nil` for all.
    public func set(_ status: ReachabilityStatus, for host: String? = nil) {
        state.withLock { state in
            if let host {
                state.hosts[host] = status
            } else {
                state.status = status
                state.hosts = [:]
            }
        }
        subscribers.notify()
    }

    /// How many subscriptions are active: parked requests (and other observers) waiting for a change.
    public var subscriberCount: Int { subscribers.count }

    /// The status of `host`.
    public func status(for host: String) -> ReachabilityStatus {
        state.withLock { $0.hosts[host] ?? $0.status }
    }

    /// A new subscription to changes.
    public func changes() -> AsyncStream<Void> {
        subscribers.subscribe()
    }
}
