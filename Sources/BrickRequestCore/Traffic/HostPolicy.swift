/// How a ``Session`` treats one host: its rate, its concurrency, what it learns from the server's
/// `429`/`503`, its circuit breaker and its retry budget. Every caller of the session that sends to
/// the host (endpoints, offline queues, anything built on the session) obeys the same policy.
///
/// ```swift
/// var configuration = Session.Configuration()
/// configuration.hostPolicies["api.partner.com"] = HostPolicy(
///     rate: .perSecond(10, burst: 20),
///     maximumConcurrentRequests: 4
/// )
/// ```
///
/// The defaults (``standard``) are for users who configure nothing:
///
/// | setting | default | why |
/// |---|---|---|
/// | ``rate`` | none | only the server knows its capacity; it says so with `429` |
/// | ``maximumConcurrentRequests`` | none | the transport's connection limits already bound it |
/// | ``whenLimited`` | wait, at most 30 s (and never past the request's own timeout) | a caller would rather get its answer a little later than an error |
/// | ``learnsFromServer`` | `true` | a `Retry-After` is the server's instruction to every caller, not to one request |
/// | ``circuitBreaker`` | ``CircuitBreakerPolicy/standard``: opens at 50 % failures over 30 s, at least 20 requests; probes every 5 s | a dead host costs a caller microseconds, not a timeout; 20 requests keep an occasional failure from opening it |
/// | ``retryBudget`` | ``RetryBudgetPolicy/standard``: retries ≤ 20 % of first attempts + 10 per second | Finagle's defaults: a fleet's retries never multiply a struggling server's load |
public struct HostPolicy: Sendable, Hashable {
    /// A token-bucket rate: `perSecond` tokens are added each second, up to `burst`; each attempt
    /// takes one.
    public struct Rate: Sendable, Hashable {
        /// Tokens added per second (requests per second in the long run). Greater than zero.
        public var perSecond: Double
        /// The most tokens the bucket holds: how many requests may go at once after a quiet spell.
        /// At least 1.
        public var burst: Int

        /// A rate of `perSecond` requests per second, with bursts of up to `burst`.
        ///
        /// - Parameters:
        ///   - perSecond: Requests per second; values below 0.001 are raised to it.
        ///   - burst: The largest burst; values below 1 are raised to 1. Default: one second's worth.
        /// - Returns: The rate.
        public static func perSecond(_ perSecond: Double, burst: Int? = nil) -> Rate {
            let perSecond = max(0.001, perSecond)
            return Rate(perSecond: perSecond, burst: max(1, burst ?? Int(perSecond.rounded(.up))))
        }
    }

    /// What a request does when the host's policy would hold it back (rate, concurrency, a pause
    /// the server asked for).
    public enum WhenLimited: Sendable, Hashable {
        /// Wait, but at most this long, and never past the request's own timeout; beyond that,
        /// fail at once with ``BrickError/Code/rateLimited`` or ``BrickError/Code/hostPaused``.
        case wait(atMost: Duration)
        /// Fail at once with ``BrickError/Code/rateLimited`` or ``BrickError/Code/hostPaused``.
        case fail
    }

    /// The host's rate, or `nil` for none of our own (a `429` may still lower it: ``learnsFromServer``).
    public var rate: Rate?
    /// The most attempts in flight to the host at once, or `nil` for no cap.
    public var maximumConcurrentRequests: Int?
    /// Wait or fail when the host is over its rate or concurrency, or paused.
    public var whenLimited: WhenLimited
    /// Whether a `429` or `503` with `Retry-After` pauses the host for every caller until that date,
    /// and a bare `429` lowers its rate (halved, then regained as successes return). Default `true`.
    public var learnsFromServer: Bool
    /// The host's circuit breaker, or `nil` for none.
    public var circuitBreaker: CircuitBreakerPolicy?
    /// The host's retry budget, or `nil` for none (every retry its configuration allows is made).
    public var retryBudget: RetryBudgetPolicy?

    /// Creates a policy; every argument has the default of ``standard``.
    ///
    /// - Parameters:
    ///   - rate: A token-bucket rate, or `nil`.
    ///   - maximumConcurrentRequests: A cap on attempts in flight, or `nil`.
    ///   - whenLimited: Wait (bounded) or fail when held back.
    ///   - learnsFromServer: Obey `429`/`503` `Retry-After` for every caller; slow down on a bare `429`.
    ///   - circuitBreaker: The circuit breaker, or `nil`.
    ///   - retryBudget: The retry budget, or `nil`.
    public init(
        rate: Rate? = nil,
        maximumConcurrentRequests: Int? = nil,
        whenLimited: WhenLimited = .wait(atMost: .seconds(30)),
        learnsFromServer: Bool = true,
        circuitBreaker: CircuitBreakerPolicy? = .standard,
        retryBudget: RetryBudgetPolicy? = .standard
    ) {
        self.rate = rate
        self.maximumConcurrentRequests = maximumConcurrentRequests.map { max(1, $0) }
        self.whenLimited = whenLimited
        self.learnsFromServer = learnsFromServer
        self.circuitBreaker = circuitBreaker
        self.retryBudget = retryBudget
    }

    /// The defaults: no rate or concurrency cap of our own, learns from `429`/`503`, the standard
    /// circuit breaker and retry budget, waits at most 30 s when held back.
    public static let standard = HostPolicy()

    /// No traffic control at all: no rate, no cap, nothing learned from the server, no breaker, no
    /// budget (each request follows only its own retry configuration).
    public static let unlimited = HostPolicy(learnsFromServer: false, circuitBreaker: nil, retryBudget: nil)

    /// Whether the policy asks for nothing: the session skips its bookkeeping for such hosts.
    var isUnlimited: Bool {
        rate == nil && maximumConcurrentRequests == nil && !learnsFromServer && circuitBreaker == nil
            && retryBudget == nil
    }
}

/// When a host's circuit breaker opens, and how it tests the host again.
///
/// Closed, the breaker counts outcomes over ``window``: a network-class failure (refused, reset,
/// timed out) or a `5xx` other than a `503` with `Retry-After` is a failure; a `4xx` never is (the
/// server answered). Once at least ``minimumRequests`` outcomes were counted and the failures reach
/// ``failureRatio``, it **opens**: attempts to the host fail at once with
/// ``BrickError/Code/circuitOpen`` (a request that may park because the host is unreachable parks
/// instead). After ``breakDuration`` it is **half-open**: one attempt goes through as a probe while
/// the others still fail at once; the probe's success **closes** it, its failure opens it again.
public struct CircuitBreakerPolicy: Sendable, Hashable {
    /// The share of failures that opens the breaker, in `0…1`.
    public var failureRatio: Double
    /// The fewest outcomes in the window before the breaker may open.
    public var minimumRequests: Int
    /// How far back outcomes are counted.
    public var window: Duration
    /// How long the breaker stays open before it lets a probe through.
    public var breakDuration: Duration

    /// Creates a breaker policy.
    ///
    /// - Parameters:
    ///   - failureRatio: Failures over outcomes that open the breaker. Default 0.5.
    ///   - minimumRequests: Fewest outcomes before it may open. Default 20.
    ///   - window: How far back outcomes count. Default 30 s.
    ///   - breakDuration: Open time before a probe. Default 5 s.
    public init(
        failureRatio: Double = 0.5,
        minimumRequests: Int = 20,
        window: Duration = .seconds(30),
        breakDuration: Duration = .seconds(5)
    ) {
        self.failureRatio = min(1, max(0, failureRatio))
        self.minimumRequests = max(1, minimumRequests)
        self.window = max(.milliseconds(10), window)
        self.breakDuration = max(.zero, breakDuration)
    }

    /// 50 % failures over 30 s with at least 20 requests; a probe every 5 s while open.
    public static let standard = CircuitBreakerPolicy()
}

/// How many retries a host may receive beyond its first attempts.
///
/// Over ``window``, retries may number at most `ratio × first attempts + minimumPerSecond × window`
/// (Finagle's retry budget: a percentage of the traffic, plus a small floor so that a quiet host
/// still gets its retries). A retry over the budget is not made: the request delivers the outcome
/// of its last attempt, as if it had no retries left.
///
/// | first attempts in the window (10 s) | retries allowed (20 %, floor 10/s) |
/// |---|---|
/// | 0 | 100 |
/// | 100 | 120 |
/// | 1,000 | 300 |
/// | 10,000 | 2,100 |
public struct RetryBudgetPolicy: Sendable, Hashable {
    /// Retries allowed per first attempt, in `0…`.
    public var ratio: Double
    /// Retries allowed per second of the window whatever the traffic.
    public var minimumPerSecond: Double
    /// How far back attempts count.
    public var window: Duration

    /// Creates a budget.
    ///
    /// - Parameters:
    ///   - ratio: Retries per first attempt. Default 0.2.
    ///   - minimumPerSecond: The floor, retries per second. Default 10.
    ///   - window: How far back attempts count. Default 10 s.
    public init(ratio: Double = 0.2, minimumPerSecond: Double = 10, window: Duration = .seconds(10)) {
        self.ratio = max(0, ratio)
        self.minimumPerSecond = max(0, minimumPerSecond)
        self.window = max(.milliseconds(10), window)
    }

    /// 20 % of first attempts plus 10 retries per second, over 10 s.
    public static let standard = RetryBudgetPolicy()
}

/// The ``HostPolicy`` of every host a session sends to: one for all, and some by name.
///
/// A request's host is matched by its authority as the URL gives it (`"api.example.com:8443"`),
/// then by its host name alone (`"api.example.com"`), then gets ``default``.
public struct HostPolicies: Sendable, Hashable {
    /// The policy of hosts not named.
    public var `default`: HostPolicy
    /// Policies by host name or `host:port`.
    public var byHost: [String: HostPolicy]

    /// Creates the policies.
    ///
    /// - Parameters:
    ///   - default: The policy of hosts not named. Default ``HostPolicy/standard``.
    ///   - byHost: Policies by host name or `host:port`.
    public init(default: HostPolicy = .standard, byHost: [String: HostPolicy] = [:]) {
        self.default = `default`
        self.byHost = Dictionary(byHost.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { $1 })
    }

    /// The policy of one host name or `host:port`, when it has one of its own.
    ///
    /// - Parameter host: A host name or `host:port`.
    public subscript(host: String) -> HostPolicy? {
        get { byHost[host.lowercased()] }
        set { byHost[host.lowercased()] = newValue }
    }

    /// The policy a request to `authority` follows.
    ///
    /// - Parameters:
    ///   - authority: `host[:port]`, lowercased.
    ///   - host: The host name alone.
    /// - Returns: The policy.
    func policy(authority: String, host: String) -> HostPolicy {
        byHost[authority] ?? byHost[host] ?? self.default
    }
}
