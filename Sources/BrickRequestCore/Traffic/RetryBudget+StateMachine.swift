/// A host's retry budget: a pure state machine over two sliding windows (first attempts and
/// retries), with the rule of ``RetryBudgetPolicy``: a retry is made only while
/// `retries + 1 ≤ ratio × first attempts + minimumPerSecond × window`, all counted over the window.
///
/// | first attempts | retries made | policy (20 %, 10/s, 10 s) | next retry |
/// |---|---|---|---|
/// | 0 | 99 | allows 100 | made |
/// | 0 | 100 | allows 100 | refused |
/// | 1,000 | 299 | allows 300 | made |
/// | 1,000 | 300 | allows 300 | refused |
package struct RetryBudget: Sendable, Hashable {
    /// The rule.
    package let policy: RetryBudgetPolicy
    private var firsts: SlidingWindow
    private var retries: SlidingWindow
    /// Whether the last retry asked for was refused (so that exhaustion is reported once, not per
    /// refused retry).
    package private(set) var isExhausted = false

    /// A budget with nothing spent.
    ///
    /// - Parameter policy: The rule.
    package init(policy: RetryBudgetPolicy) {
        self.policy = policy
        firsts = SlidingWindow(length: policy.window)
        retries = SlidingWindow(length: policy.window)
    }

    /// Records first attempts (each earns `ratio` retries).
    ///
    /// - Parameters:
    ///   - count: How many (one by default).
    ///   - now: The time.
    package mutating func firstAttempt(_ count: Int = 1, at now: Duration) {
        firsts.add(count, at: now)
    }

    /// Attempts (first and retries) counted over the last `span` (whole buckets).
    ///
    /// - Parameters:
    ///   - span: How far back.
    ///   - now: The time.
    package func attempts(over span: Duration, at now: Duration) -> Int {
        firsts.total(over: span, at: now) + retries.total(over: span, at: now)
    }

    /// The retries the budget allows now beyond those already made.
    ///
    /// - Parameter now: The time.
    package func left(at now: Duration) -> Int {
        let allowed = policy.ratio * Double(firsts.total(at: now)) + policy.minimumPerSecond * firsts.length.seconds
        return max(0, Int(allowed.rounded(.down)) - retries.total(at: now))
    }

    /// Spends one retry if the budget allows it.
    ///
    /// - Parameter now: The time.
    /// - Returns: Whether the retry may be made, and whether this refusal is the first of a run
    ///   (worth reporting).
    package mutating func spend(at now: Duration) -> (allowed: Bool, newlyExhausted: Bool) {
        guard left(at: now) >= 1 else {
            defer { isExhausted = true }
            return (false, !isExhausted)
        }
        retries.add(at: now)
        isExhausted = false
        return (true, false)
    }

    /// Whether the budget holds nothing worth keeping at `now` (no attempt in the window).
    ///
    /// - Parameter now: The time.
    package func isAtRest(at now: Duration) -> Bool {
        firsts.total(at: now) == 0 && retries.total(at: now) == 0
    }
}
