import FoundationEssentials
import Glibc

/// The retry engine: a pure state machine with no I/O. The ``Session`` feeds it the outcome of each
/// attempt and performs the action it returns (start an attempt, wait, park, deliver).
///
/// Delays (``AutoRetryConfiguration/Backoff``):
/// - constant: `breakTime` after every failure;
/// - exponential: `min(max, breakTime × multiplier^(n−1))` after the n-th failure, then *full
///   jitter*: a uniformly random delay in `0…that`. With `breakTime` 1 s, multiplier 2, max 60 s:
///
/// | failure n | cap of the delay | delay range |
/// |---|---|---|
/// | 1 | 1 s | 0–1 s |
/// | 2 | 2 s | 0–2 s |
/// | 5 | 16 s | 0–16 s |
/// | 10 | 60 s (512 s capped) | 0–60 s |
///
/// A `Retry-After` header (when ``AutoRetryConfiguration/honorsRetryAfter``) is never undercut: the
/// delay is at least what the server asked. An in-memory call never waits past its own time limit
/// (the request's `timeout` and ``AutoRetryConfiguration/maxTotalDuration``, whichever is shorter,
/// from the first attempt's start), and never longer than ``longestRetryAfter`` (its host's
/// ``HostPolicy/WhenLimited`` wait, 30 s by default) for a `Retry-After`: a server that asks for
/// more ends the call at once with its response, and ``declinedRetryAfter`` says what it asked
/// (long waits belong to the durable queue, which persists the date).
package struct RetryEngine: Sendable {
    /// What the session does next.
    package enum Action: Sendable, Hashable {
        /// Send the request again now.
        case retry
        /// Wait this long (on the session's clock), then send again.
        case retryAfter(Duration)
        /// Wait until the destination is reachable, then send again; no attempt is spent.
        case park
        /// Deliver the outcome of the last attempt.
        case deliver
    }

    /// The outcome of one attempt, as the engine sees it.
    package enum Outcome: Sendable, Hashable {
        /// A response arrived; `retryAfter` is its `Retry-After` delay, if any.
        case response(status: Int, retryAfter: Duration?)
        /// The transport failed.
        case failure(TransportError)
    }

    /// The longest `Retry-After` obeyed by default: 30 s, the default host policy's wait.
    package static let defaultLongestRetryAfter: Duration = .seconds(30)

    /// The configuration in force.
    package let configuration: AutoRetryConfiguration
    /// The call's own time limit, measured from its first attempt's start: the shorter of the
    /// request's `timeout` and ``AutoRetryConfiguration/maxTotalDuration``; `nil` for none.
    package let timeLimit: Duration?
    /// The longest `Retry-After` the call waits for; a longer one ends it with the response.
    package let longestRetryAfter: Duration
    /// The `Retry-After` of the last response, when the engine delivered it without waiting for
    /// it (longer than ``longestRetryAfter``, past the time limit, or no retries left).
    package private(set) var declinedRetryAfter: Duration?
    /// Whether the request may be repeated (idempotent method or `Idempotency-Key`).
    package let isIdempotent: Bool
    /// Retries made so far (attempts spent, parking excluded).
    package private(set) var retryCount = 0
    /// The reason for the last decision, for logs.
    package private(set) var lastReason = ""
    private let random: @Sendable (Double) -> Double

    /// Creates an engine for one logical request.
    ///
    /// - Parameters:
    ///   - configuration: The retry configuration.
    ///   - isIdempotent: Whether the request may be repeated.
    ///   - timeout: The request's own timeout, which bounds the whole call, or `nil`.
    ///   - longestRetryAfter: The longest `Retry-After` waited for (the host's wait).
    ///   - random: Returns a uniform value in `0…upperBound` (injected for tests).
    package init(
        configuration: AutoRetryConfiguration,
        isIdempotent: Bool,
        timeout: Duration? = nil,
        longestRetryAfter: Duration = RetryEngine.defaultLongestRetryAfter,
        random: @escaping @Sendable (Double) -> Double = { Double.random(in: 0...$0) }
    ) {
        self.configuration = configuration
        self.isIdempotent = isIdempotent
        switch (configuration.maxTotalDuration, timeout) {
        case (let total?, let timeout?): timeLimit = min(total, timeout)
        case (let total, let timeout): timeLimit = total ?? timeout
        }
        self.longestRetryAfter = max(.zero, longestRetryAfter)
        self.random = random
    }

    /// Decides what follows an attempt.
    ///
    /// - Parameters:
    ///   - outcome: What the attempt produced.
    ///   - elapsed: Time since the first attempt started.
    ///   - isReachable: Whether the destination is reachable now (`nil`: unknown).
    ///   - response: The response, for the configuration's ``AutoRetryConfiguration/rule``.
    /// - Returns: The action to perform.
    package mutating func attemptFinished(
        _ outcome: Outcome,
        elapsed: Duration,
        isReachable: Bool?,
        response: TransportResponse? = nil
    ) -> Action {
        declinedRetryAfter = nil
        // A refusal by the host's traffic policy is that policy's decision, not the rule's.
        if let rule = configuration.rule, !Self.isHeldBack(outcome) {
            var context = RetryContext(attempt: retryCount + 1, response: response, elapsed: elapsed, isIdempotent: isIdempotent)
            if case .failure(let error) = outcome { context.error = error }
            if case .response(let status, _) = outcome, response == nil {
                context.response = TransportResponse(status: .init(code: status))
            }
            switch rule.decide(context) {
            case .useTable:
                break
            case .fail:
                lastReason = "the retry rule said fail"
                return .deliver
            case .retry:
                return retry(after: .zero, elapsed: elapsed, reason: "the retry rule said retry")
            case .retryAfter(let delay):
                return retry(after: max(.zero, delay), elapsed: elapsed, reason: "the retry rule said retry after \(delay)")
            }
        }
        let verdict: RetryVerdict
        var retryAfter: Duration? = nil
        switch outcome {
        case .response(let status, let after):
            (verdict, lastReason) = RetryClassification.verdict(
                forStatus: status,
                configuration: configuration,
                isIdempotent: isIdempotent
            )
            retryAfter = configuration.honorsRetryAfter ? after : nil
        case .failure(let error) where error.kind == .circuitOpen:
            // An open breaker fails fast, except for a request that may park while the host is
            // unreachable: it waits for the network, spending nothing, and is admitted again.
            if configuration.enableBackgroundRetry && !configuration.failWhenNotReachable && isReachable == false {
                lastReason = "the circuit breaker is open and the host is unreachable: wait for the network"
                return .park
            }
            lastReason = "the circuit breaker is open: fail fast"
            return .deliver
        case .failure(let error):
            (verdict, lastReason) = RetryClassification.verdict(for: error, isIdempotent: isIdempotent)
        }
        switch verdict {
        case .fatal:
            return .deliver
        case .parkUntilOnline where configuration.enableBackgroundRetry && isReachable == false:
            if configuration.failWhenNotReachable { return .deliver }
            if let limit = timeLimit, elapsed >= limit {
                lastReason = "the call's time limit (\(limit)) was reached"
                return .deliver
            }
            // Parking spends no attempt; the monitor releases the request when the route returns.
            return .park
        case .parkUntilOnline, .backOffAndRetry:
            // An offline-class failure while the monitor sees a route (or cannot tell) is retried
            // like any transient failure: spending attempts, so it can never loop.
            guard retryCount < configuration.maxRetryCount else {
                lastReason = "no retries left (\(configuration.maxRetryCount) allowed): " + lastReason
                declinedRetryAfter = retryAfter
                return .deliver
            }
            if let retryAfter, retryAfter > longestRetryAfter {
                lastReason = "the server asked to retry after \(retryAfter), longer than a call waits (\(longestRetryAfter)): delivered at once"
                declinedRetryAfter = retryAfter
                return .deliver
            }
            let delay = max(backoffDelay(afterFailure: retryCount + 1), retryAfter ?? .zero)
            if let limit = timeLimit, elapsed + delay > limit {
                lastReason = "the next attempt would pass the call's time limit (\(limit))"
                declinedRetryAfter = retryAfter
                return .deliver
            }
            retryCount += 1
            return delay == .zero ? .retry : .retryAfter(delay)
        }
    }

    private static func isHeldBack(_ outcome: Outcome) -> Bool {
        if case .failure(let error) = outcome { return NetworkFailure.of(error.kind) == .heldBack }
        return false
    }

    /// A retry the rule asked for, within the count and time limits.
    private mutating func retry(after delay: Duration, elapsed: Duration, reason: String) -> Action {
        lastReason = reason
        guard retryCount < configuration.maxRetryCount else {
            lastReason = "no retries left (\(configuration.maxRetryCount) allowed): " + reason
            return .deliver
        }
        if let limit = timeLimit, elapsed + delay > limit {
            lastReason = "the next attempt would pass the call's time limit (\(limit))"
            return .deliver
        }
        retryCount += 1
        return delay == .zero ? .retry : .retryAfter(delay)
    }

    /// The backoff delay after the n-th failure (1-based), jitter included.
    ///
    /// - Parameter failure: Which failure this is (1 for the first).
    /// - Returns: The delay.
    package func backoffDelay(afterFailure failure: Int) -> Duration {
        switch configuration.backoff {
        case .constant:
            return configuration.breakTime
        case .exponential(let multiplier, let maximum):
            let base = configuration.breakTime.seconds
            // Cap before converting, so large exponents never overflow.
            let exponent = min(Double(max(0, failure - 1)), 1000)
            let capped = min(maximum.seconds, base * pow(multiplier, exponent))
            return .nanoseconds(Int64((random(max(0, capped)) * 1e9).rounded()))
        }
    }
}

