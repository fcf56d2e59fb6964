/// A host's rate: a token bucket, the pause the server asked for, and the rate learned from bare
/// `429`s. A pure state machine: times are the session clock's elapsed time, and the shell
/// (``TrafficControl``) does the waiting.
///
/// **Token bucket** (with a configured or learned rate): `rate` tokens a second up to `burst`; an
/// attempt takes one. One that finds none *reserves* the next (the count goes below zero) and waits
/// until it is due, so waiters are served in order, one per `1/rate`, without waking each other
/// (Go's `x/time/rate` reservations); one whose token would come later than it may wait is refused
/// and takes nothing.
///
/// **Pause**: a `429`, or a `503`, with `Retry-After` pauses the host until that date (the later of
/// two pauses wins).
///
/// **Learned rate (AIMD)**: a bare `429` halves the rate in force (the configured rate, or the rate
/// actually sent over the last 2 s when there is none), never below ``minimumRate``, at most once
/// per ``decreaseSpacing`` (the answers to requests already in flight are one signal, not many).
/// Successes then raise it linearly in time, by ``recoveryPerSecond`` of the rate before the first
/// cut each second, until it is back there and the learned limit is dropped. Multiplicative
/// decrease backs off fast from an overloaded server; additive increase probes gently (TCP's
/// congestion control, and the AWS SDKs' adaptive retry mode). With the defaults:
///
/// | event | rate (requests/s) |
/// |---|---|
/// | sending 40/s, no rate configured | no limit |
/// | bare `429` | 20 |
/// | another `429` 0.5 s later | 20 (within `decreaseSpacing`) |
/// | another `429` 2 s later | 10 |
/// | successes for 2 s | 10 + 2 × 4 = 18 |
/// | successes for 5 s more | 18 + 5 × 4 = 38 |
/// | a success 1 s later | 42 ≥ 40: no limit |
package struct RateLimiter: Sendable, Hashable {
    /// What an attempt gets from the bucket.
    package enum Reservation: Sendable, Hashable {
        /// A token: go now.
        case now
        /// A token reserved: go after this wait.
        case after(Duration)
        /// No token before `until`, later than the attempt may wait; nothing taken.
        case refused(until: Duration)
    }

    /// A change of the rate in force, for events and logs.
    package enum Change: Sendable, Hashable {
        /// A bare `429` lowered the rate to this many requests per second.
        case lowered(to: Double)
        /// Successes brought the rate back: the learned limit is gone.
        case restored
    }

    /// The factor a bare `429` multiplies the rate by.
    package static let decreaseFactor = 0.5
    /// The lowest learned rate, requests per second.
    package static let minimumRate = 0.5
    /// The share of the rate before the first cut regained per second of successes.
    package static let recoveryPerSecond = 0.1
    /// The least time between two cuts.
    package static let decreaseSpacing: Duration = .seconds(1)

    /// The configured rate, if any.
    package let configured: HostPolicy.Rate?
    /// Tokens in the bucket (below zero: reserved by waiters).
    package private(set) var tokens: Double
    private var refilledAt: Duration = .zero
    /// The rate learned from bare `429`s, requests per second, or `nil`.
    package private(set) var learned: Double?
    /// The rate before the first cut of the current episode.
    private var ceiling: Double = 0
    private var lastDecrease: Duration?
    private var raisedAt: Duration = .zero
    /// The end of the pause the server asked for, if it ever asked.
    package private(set) var pausedUntil: Duration?

    /// A limiter with a configured rate (or none).
    ///
    /// - Parameter configured: The rate, or `nil`.
    package init(configured: HostPolicy.Rate?) {
        self.configured = configured
        tokens = Double(configured?.burst ?? 1)
    }

    /// The rate in force, requests per second: the lower of the configured and the learned; `nil`
    /// for none.
    package var rate: Double? {
        switch (configured?.perSecond, learned) {
        case (let configured?, let learned?): return min(configured, learned)
        case (let configured?, nil): return configured
        case (nil, let learned?): return learned
        case (nil, nil): return nil
        }
    }

    /// The bucket's size: the configured burst, or 1 while a learned rate paces the host.
    private var burst: Double {
        learned == nil ? Double(configured?.burst ?? 1) : 1
    }

    /// The pause in force at `now`, if any: its end.
    ///
    /// - Parameter now: The time.
    /// - Returns: The end of the pause, when it is later than `now`.
    package func pause(at now: Duration) -> Duration? {
        guard let pausedUntil, pausedUntil > now else { return nil }
        return pausedUntil
    }

    /// Whether the limiter holds nothing worth keeping at `now` (no pause, no learned rate that
    /// has not recovered, a full bucket): an idle host may then be forgotten.
    ///
    /// - Parameter now: The time.
    package func isAtRest(at now: Duration) -> Bool {
        guard pause(at: now) == nil, hasRecovered(at: now) else { return false }
        guard let rate else { return true }
        return tokens + rate * (now - refilledAt).seconds >= burst
    }

    /// Whether no learned rate holds at `now`: none was learned, or the time since the last
    /// change would have raised it back to its ceiling (silence counts as successes do, so a host
    /// that went quiet after a bare `429` is not slowed for ever).
    ///
    /// - Parameter now: The time.
    package func hasRecovered(at now: Duration) -> Bool {
        guard let learned else { return true }
        return learned + ceiling * Self.recoveryPerSecond * max(.zero, now - raisedAt).seconds >= ceiling
    }

    /// Takes a token, or reserves the next one, or refuses.
    ///
    /// - Parameters:
    ///   - now: The time.
    ///   - maxWait: The longest the attempt may wait for its token.
    /// - Returns: The reservation.
    package mutating func reserve(at now: Duration, maxWait: Duration) -> Reservation {
        guard let rate else { return .now }
        refill(at: now, rate: rate)
        if tokens >= 1 {
            tokens -= 1
            return .now
        }
        let wait = Duration.seconds((1 - tokens) / rate)
        if wait > maxWait { return .refused(until: now + wait) }
        tokens -= 1
        return .after(wait)
    }

    /// Pauses the host until `until`, unless a later pause is in force.
    ///
    /// - Parameter until: The end of the pause.
    /// - Returns: Whether the pause was extended (an event worth reporting).
    package mutating func pause(until: Duration) -> Bool {
        if let pausedUntil, pausedUntil >= until { return false }
        pausedUntil = until
        return true
    }

    /// A bare `429`: cut the rate.
    ///
    /// - Parameters:
    ///   - now: The time.
    ///   - sendingRate: The rate actually sent recently (requests per second), the starting point
    ///     when no rate is in force.
    /// - Returns: The change, or `nil` within ``decreaseSpacing`` of the last cut.
    package mutating func throttled(at now: Duration, sendingRate: Double) -> Change? {
        if let lastDecrease, now - lastDecrease < Self.decreaseSpacing { return nil }
        let current = rate ?? max(sendingRate, 2 * Self.minimumRate)
        if let rate { refill(at: now, rate: rate) }
        if learned == nil { ceiling = configured?.perSecond ?? current }
        let lowered = max(Self.minimumRate, current * Self.decreaseFactor)
        learned = lowered
        // Paced from now on: no burst on the way down.
        tokens = min(tokens, 1)
        refilledAt = now
        lastDecrease = now
        raisedAt = now
        return .lowered(to: lowered)
    }

    /// A success: regain rate, linearly in the time since the last change.
    ///
    /// - Parameter now: The time.
    /// - Returns: ``Change/restored`` when the learned limit is dropped, else `nil`.
    package mutating func succeeded(at now: Duration) -> Change? {
        guard let current = learned else { return nil }
        let elapsed = max(.zero, now - raisedAt)
        guard elapsed > .zero else { return nil }
        refill(at: now, rate: rate ?? current)
        raisedAt = now
        let raised = current + ceiling * Self.recoveryPerSecond * elapsed.seconds
        if raised >= ceiling {
            learned = nil
            lastDecrease = nil
            return .restored
        }
        learned = raised
        return nil
    }

    private mutating func refill(at now: Duration, rate: Double) {
        let elapsed = now - refilledAt
        if elapsed > .zero {
            tokens = min(burst, tokens + rate * elapsed.seconds)
            refilledAt = now
        }
    }
}
