/// A retry decision of your own, for what the table of ``AutoRetryConfiguration`` cannot say
/// (Alamofire's `RequestRetrier`): it sees each finished attempt and answers retry, retry after a
/// delay, fail, or leave it to the table.
///
/// ```swift
/// struct RetryOnStaleToken: RetryRule {
///     func decide(_ attempt: RetryContext) -> RetryDecision {
///         if attempt.response?.headerFields[HTTPField.Name("X-Token-Expired")!] == "1" { return .retry }
///         if attempt.error?.kind == .tls { return .fail }
///         return .useTable
///     }
/// }
/// let configuration = AutoRetryConfiguration(maxRetryCount: 2, rule: RetryOnStaleToken())
/// // or, with a closure:
/// let quick = AutoRetryConfiguration.custom(maxRetryCount: 3) { $0.status == 409 ? .retryAfter(.seconds(1)) : .useTable }
/// ```
///
/// The rule runs on the session's side, synchronously, after every attempt that did not succeed
/// outright — a transport failure, or any response that is not the last word: it is asked about
/// every response status when a rule is set. ``AutoRetryConfiguration/maxRetryCount`` and
/// ``AutoRetryConfiguration/maxTotalDuration`` still bound what it asks for, and a cancelled
/// request is never retried. A retry the rule asks for is made even for a request that is not
/// idempotent: the rule takes that responsibility.
public protocol RetryRule: Sendable {
    /// What to do after `attempt`.
    ///
    /// - Parameter attempt: The attempt that just finished.
    /// - Returns: The decision.
    func decide(_ attempt: RetryContext) -> RetryDecision
}

/// What a ``RetryRule`` sees of a finished attempt.
public struct RetryContext: Sendable {
    /// Which attempt finished: 1 for the first.
    public var attempt: Int
    /// The response, when one arrived.
    public var response: TransportResponse?
    /// The transport's failure, when no response arrived.
    public var error: TransportError?
    /// Time since the first attempt started.
    public var elapsed: Duration
    /// Whether the request may be repeated safely (idempotent method or `Idempotency-Key`).
    public var isIdempotent: Bool

    /// The response's status code, when a response arrived.
    public var status: Int? { response?.status.code }

    /// Creates a context.
    ///
    /// - Parameters:
    ///   - attempt: Which attempt finished (1 for the first).
    ///   - response: The response, if any.
    ///   - error: The failure, if any.
    ///   - elapsed: Time since the first attempt started.
    ///   - isIdempotent: Whether the request may be repeated safely.
    public init(
        attempt: Int,
        response: TransportResponse? = nil,
        error: TransportError? = nil,
        elapsed: Duration = .zero,
        isIdempotent: Bool = true
    ) {
        self.attempt = attempt
        self.response = response
        self.error = error
        self.elapsed = elapsed
        self.isIdempotent = isIdempotent
    }
}

/// A ``RetryRule``'s answer.
public enum RetryDecision: Sendable, Hashable {
    /// Send the request again now.
    case retry
    /// Send it again after this delay.
    case retryAfter(Duration)
    /// Deliver this outcome: no retry.
    case fail
    /// Decide as the configuration's table does.
    case useTable
}

/// A ``RetryRule`` made of a closure.
public struct ClosureRetryRule: RetryRule {
    private let body: @Sendable (RetryContext) -> RetryDecision

    /// Creates a rule.
    ///
    /// - Parameter body: The decision.
    public init(_ body: @escaping @Sendable (RetryContext) -> RetryDecision) {
        self.body = body
    }

    /// Calls the closure.
    public func decide(_ attempt: RetryContext) -> RetryDecision { body(attempt) }
}
