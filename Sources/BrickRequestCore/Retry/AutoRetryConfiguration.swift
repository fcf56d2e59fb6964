/// How a request retries after a failure.
///
/// ```swift
/// AutoRetryConfiguration(maxRetryCount: 3, backoff: .exponential(multiplier: 2, max: .seconds(60)))
/// ```
///
/// - ``maxRetryCount`` is exact: 0 means one attempt and no retry.
/// - Only idempotent methods retry (`GET`, `HEAD`, `PUT`, `DELETE`, `OPTIONS`, `TRACE`), and requests
///   that carry an `Idempotency-Key` (``IdempotentRequestType``) — with one exception: any request,
///   a `POST` included, is retried after a failure that sent nothing (the connection was refused or
///   never made, no route, no name), since the server cannot have acted on it.
/// - ``enableBackgroundRetry``: a failure of the offline class parks the request, spending no attempt,
///   until the destination is reachable again; `false` makes offline failures spend attempts.
/// - ``failWhenNotReachable``: fail at once, without sending, when the destination has no route.
/// - ``rule``: a ``RetryRule`` of your own, asked first after each attempt.
///
/// Two configurations are equal when their settings are, and their rules are both absent or of the
/// same type.
public struct AutoRetryConfiguration: Sendable, Hashable {
    /// How the wait between attempts grows.
    public enum Backoff: Sendable, Hashable {
        /// Always ``AutoRetryConfiguration/breakTime``.
        case constant
        /// `breakTime × multiplier^(n−1)` after the n-th failure, capped at `max`, with full jitter
        /// (a uniformly random wait between zero and that value).
        case exponential(multiplier: Double, max: Duration)
    }

    /// The base wait between attempts. Default 5 s.
    public var breakTime: Duration
    /// Retries after the first attempt; exact (0 = no retry). Default 5.
    public var maxRetryCount: Int
    /// Park offline failures until the network returns instead of spending attempts. Default `true`.
    public var enableBackgroundRetry: Bool
    /// Fail at once when the destination has no route. Default `false`.
    public var failWhenNotReachable: Bool
    /// How waits grow. Default ``Backoff/constant``.
    public var backoff: Backoff
    /// Statuses that are retried. Default 408, 429, 500, 502, 503, 504.
    public var retryableStatusCodes: Set<Int>
    /// Whether a `Retry-After` header (seconds or HTTP date) sets the wait. Default `true`.
    public var honorsRetryAfter: Bool
    /// The longest time from the first attempt to the last, or `nil` for no limit.
    public var maxTotalDuration: Duration?
    /// A decision of your own, asked before the table after each attempt; `nil` for none.
    public var rule: (any RetryRule)?

    /// Creates a configuration; every argument has a default.
    ///
    /// - Parameters:
    ///   - breakTime: Base wait between attempts.
    ///   - maxRetryCount: Retries after the first attempt (exact).
    ///   - enableBackgroundRetry: Park offline failures until the network returns.
    ///   - failWhenNotReachable: Fail at once when there is no route.
    ///   - backoff: How waits grow.
    ///   - retryableStatusCodes: Statuses that are retried.
    ///   - honorsRetryAfter: Obey `Retry-After`.
    ///   - maxTotalDuration: Overall limit, or `nil`.
    ///   - rule: A decision of your own, asked first; `nil` for none.
    public init(
        breakTime: Duration = .seconds(5),
        maxRetryCount: Int = 5,
        enableBackgroundRetry: Bool = true,
        failWhenNotReachable: Bool = false,
        backoff: Backoff = .constant,
        retryableStatusCodes: Set<Int> = [408, 429, 500, 502, 503, 504],
        honorsRetryAfter: Bool = true,
        maxTotalDuration: Duration? = nil,
        rule: (any RetryRule)? = nil
    ) {
        self.rule = rule
        self.breakTime = breakTime
        self.maxRetryCount = max(0, maxRetryCount)
        self.enableBackgroundRetry = enableBackgroundRetry
        self.failWhenNotReachable = failWhenNotReachable
        self.backoff = backoff
        self.retryableStatusCodes = retryableStatusCodes
        self.honorsRetryAfter = honorsRetryAfter
        self.maxTotalDuration = maxTotalDuration
    }

    /// A configuration whose decisions come from `decide` first (``RetryDecision/useTable`` for the
    /// table's), with the other settings at their defaults.
    ///
    /// - Parameters:
    ///   - maxRetryCount: Retries after the first attempt (exact); bounds what `decide` asks for.
    ///   - breakTime: The wait of a table decision.
    ///   - decide: The decision.
    /// - Returns: The configuration.
    public static func custom(
        maxRetryCount: Int = 5,
        breakTime: Duration = .seconds(5),
        _ decide: @escaping @Sendable (RetryContext) -> RetryDecision
    ) -> AutoRetryConfiguration {
        AutoRetryConfiguration(breakTime: breakTime, maxRetryCount: maxRetryCount, rule: ClosureRetryRule(decide))
    }

    /// Equal settings, and rules both absent or of the same type.
    public static func == (lhs: AutoRetryConfiguration, rhs: AutoRetryConfiguration) -> Bool {
        lhs.breakTime == rhs.breakTime && lhs.maxRetryCount == rhs.maxRetryCount
            && lhs.enableBackgroundRetry == rhs.enableBackgroundRetry
            && lhs.failWhenNotReachable == rhs.failWhenNotReachable && lhs.backoff == rhs.backoff
            && lhs.retryableStatusCodes == rhs.retryableStatusCodes && lhs.honorsRetryAfter == rhs.honorsRetryAfter
            && lhs.maxTotalDuration == rhs.maxTotalDuration && lhs.ruleType == rhs.ruleType
    }

    /// Hashes the settings and the rule's type.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(breakTime)
        hasher.combine(maxRetryCount)
        hasher.combine(enableBackgroundRetry)
        hasher.combine(failWhenNotReachable)
        hasher.combine(backoff)
        hasher.combine(retryableStatusCodes)
        hasher.combine(honorsRetryAfter)
        hasher.combine(maxTotalDuration)
        hasher.combine(ruleType)
    }

    private var ruleType: ObjectIdentifier? { rule.map { ObjectIdentifier(type(of: $0)) } }

    /// The defaults: 5 retries, 5 s apart.
    public static let `default` = AutoRetryConfiguration()
    /// No retries.
    public static let none = AutoRetryConfiguration(maxRetryCount: 0)
    /// Three retries (``SoftAutoRetryType``).
    public static let soft = AutoRetryConfiguration(maxRetryCount: 3)
    /// Ten retries (``HardAutoRetryType``).
    public static let hard = AutoRetryConfiguration(maxRetryCount: 10)
}
