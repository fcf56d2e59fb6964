/// How a request retries after a failure.
///
/// ```swift
/// AutoRetryConfiguration(maxRetryCount: 3, backoff: .exponential(multiplier: 2, max: .seconds(60)))
/// ```
///
/// - ``maxRetryCount`` is exact: 0 means one attempt and no retry.
/// - Only idempotent methods retry (`GET`, `HEAD`, `PUT`, `DELETE`, `OPTIONS`, `TRACE`), and requests
///   that carry an `Idempotency-Key` (``IdempotentRequestType``).
/// - ``enableBackgroundRetry``: a failure of the offline class parks the request, spending no attempt,
///   until the destination is reachable again; `false` makes offline failures spend attempts.
/// - ``failWhenNotReachable``: fail at once, without sending, when the destination has no route.
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
    public init(
        breakTime: Duration = .seconds(5),
        maxRetryCount: Int = 5,
        enableBackgroundRetry: Bool = true,
        failWhenNotReachable: Bool = false,
        backoff: Backoff = .constant,
        retryableStatusCodes: Set<Int> = [408, 429, 500, 502, 503, 504],
        honorsRetryAfter: Bool = true,
        maxTotalDuration: Duration? = nil
    ) {
        self.breakTime = breakTime
        self.maxRetryCount = max(0, maxRetryCount)
        self.enableBackgroundRetry = enableBackgroundRetry
        self.failWhenNotReachable = failWhenNotReachable
        self.backoff = backoff
        self.retryableStatusCodes = retryableStatusCodes
        self.honorsRetryAfter = honorsRetryAfter
        self.maxTotalDuration = maxTotalDuration
    }

    /// The defaults: 5 retries, 5 s apart.
    public static let `default` = AutoRetryConfiguration()
    /// No retries.
    public static let none = AutoRetryConfiguration(maxRetryCount: 0)
    /// Three retries (``SoftAutoRetryType``).
    public static let soft = AutoRetryConfiguration(maxRetryCount: 3)
    /// Ten retries (``HardAutoRetryType``).
    public static let hard = AutoRetryConfiguration(maxRetryCount: 10)
}
