import FoundationEssentials

/// A change in how a session treats a host: a pause the server asked for, a rate lowered or
/// regained, the circuit breaker opening, half-opening or closing, the retry budget running out.
///
/// Delivered to every ``EventMonitor/trafficDidChange(_:)`` of the session and logged at `info`.
public struct TrafficEvent: Sendable, Hashable, CustomStringConvertible {
    /// What changed.
    public enum Kind: Sendable, Hashable {
        /// The server answered `status` (`429` or `503`) with `Retry-After`: the host is paused
        /// for every caller until `until`.
        case paused(until: Date, status: Int)
        /// A bare `429` lowered the host's rate to this many requests per second.
        case rateLowered(perSecond: Double)
        /// Successes brought the host's rate back to its configured value (or to none).
        case rateRestored
        /// The circuit breaker opened: attempts fail at once until `until`.
        case circuitOpened(until: Date)
        /// The circuit breaker lets one probe through.
        case circuitHalfOpened
        /// The probe succeeded: the circuit breaker closed.
        case circuitClosed
        /// The retry budget ran out: retries fail with their original error until first attempts
        /// earn more.
        case retryBudgetExhausted
    }

    /// The host, as `host[:port]` from the request's URL.
    public let host: String
    /// What changed.
    public let kind: Kind

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - host: The host, `host[:port]`.
    ///   - kind: What changed.
    public init(host: String, kind: Kind) {
        self.host = host
        self.kind = kind
    }

    /// One line: the host and the change.
    public var description: String {
        switch kind {
        case .paused(let until, let status):
            return "\(host) paused until \(until.formatted(.iso8601)) (status \(status) with Retry-After)"
        case .rateLowered(let rate):
            return "\(host) rate lowered to \((rate * 100).rounded() / 100) requests/s after a 429"
        case .rateRestored:
            return "\(host) rate restored"
        case .circuitOpened(let until):
            return "\(host) circuit breaker opened until \(until.formatted(.iso8601))"
        case .circuitHalfOpened:
            return "\(host) circuit breaker half-open: one probe goes through"
        case .circuitClosed:
            return "\(host) circuit breaker closed"
        case .retryBudgetExhausted:
            return "\(host) retry budget exhausted: retries fail with their original error"
        }
    }
}

/// How a session treats one host right now: read with ``Session/trafficState(forHost:)``.
public struct HostTrafficState: Sendable, Hashable {
    /// Where a host's circuit breaker stands.
    public enum Circuit: Sendable, Hashable {
        /// Attempts go; outcomes are counted.
        case closed
        /// Attempts fail at once until the date.
        case open(until: Date)
        /// One probe tests the host; other attempts fail at once.
        case halfOpen
    }

    /// The host, `host[:port]`.
    public let host: String
    /// The policy it follows.
    public let policy: HostPolicy
    /// The rate in force, requests per second, or `nil` for none.
    public let rate: Double?
    /// Whether ``rate`` is lower than the policy's because the server answered `429`.
    public let isRateLowered: Bool
    /// The end of the pause the server asked for, when one is in force.
    public let pausedUntil: Date?
    /// The circuit breaker (``Circuit/closed`` when the policy has none).
    public let circuit: Circuit
    /// Retries the budget allows now, or `nil` when the policy has no budget.
    public let retryBudgetLeft: Int?
    /// Attempts holding a concurrency slot (counted only when the policy has a cap).
    public let inFlight: Int
    /// Attempts waiting in line for a slot.
    public let waiting: Int
}
