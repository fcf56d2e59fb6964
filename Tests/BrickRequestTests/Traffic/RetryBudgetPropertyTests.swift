@testable import BrickRequestCore
import PropertyBased
import Testing

/// Random histories against the retry budget, a pure state machine: whatever the sequence of
/// first attempts and retries asked for, and however time moves, the budget never allows more
/// retries than its rule. Checked against a model of its own (exact times, not the budget's
/// buckets): the budget's window spans between `window − one bucket` and `window`, so every retry
/// it allows at `t` satisfies `retries in (t − window + bucket, t) + 1 ≤ ratio × firsts in
/// (t − window, t] + minimumPerSecond × window`. A failing history is printed with its seed;
/// keep it as a regression row below.
@Suite("Retry budget: random histories", .timeLimit(.minutes(3)))
struct RetryBudgetPropertyTests {
    /// One event: a first attempt (kind 0) or a retry asked for (kind 1), `milliseconds` after the
    /// one before.
    typealias Event = (kind: Int, milliseconds: Int)

    /// Runs `events` through a budget; returns the first violation of the rule, or `nil`.
    static func violation(_ events: [Event], policy: RetryBudgetPolicy) -> String? {
        var budget = RetryBudget(policy: policy)
        var now = Duration.zero
        var firsts: [Duration] = []
        var retries: [Duration] = []
        let bucket = policy.window / SlidingWindow.buckets
        for (index, event) in events.enumerated() {
            now += .milliseconds(event.milliseconds)
            if event.kind == 0 {
                budget.firstAttempt(at: now)
                firsts.append(now)
                continue
            }
            guard budget.spend(at: now).allowed else { continue }
            let recentRetries = retries.filter { $0 > now - policy.window + bucket && $0 <= now }.count
            let earned = firsts.filter { $0 > now - policy.window && $0 <= now }.count
            let allowed = policy.ratio * Double(earned) + policy.minimumPerSecond * policy.window.seconds
            if Double(recentRetries + 1) > allowed + 1e-9 {
                return "event \(index) at \(now): retry allowed with \(recentRetries) retries and \(earned) first attempts in the window (allows \(allowed))"
            }
            retries.append(now)
        }
        return nil
    }

    @Test("never more retries than ratio × first attempts + minimumPerSecond × window, in any window")
    func neverOverBudget() async {
        let events = zip(Gen.int(in: 0...1), Gen.int(in: 0...400)).array(of: 1...600)
        await propertyCheck(count: 200, input: events, Gen.int(in: 0...2)) { raw, shape in
            let policy = [
                RetryBudgetPolicy(ratio: 0.2, minimumPerSecond: 0.5, window: .seconds(2)),
                RetryBudgetPolicy(ratio: 0.1, minimumPerSecond: 0, window: .seconds(1)),
                RetryBudgetPolicy(ratio: 1, minimumPerSecond: 2, window: .seconds(10)),
            ][shape]
            let history = raw.map { Event(kind: $0.0, milliseconds: $0.1) }
            let found = Self.violation(history, policy: policy)
            #expect(found == nil, "\(policy): \(found ?? "")")
        }
    }

    @Test("regression rows: histories at the window's edges")
    func rows() {
        let policy = RetryBudgetPolicy(ratio: 0.5, minimumPerSecond: 0, window: .seconds(1))
        let rows: [[Event]] = [
            // Two firsts earn one retry; a second retry in the same window is refused.
            [(0, 0), (0, 10), (1, 10), (1, 10)],
            // Retries asked for right as the firsts that earned them leave the window.
            [(0, 0), (0, 0), (1, 999), (1, 1), (1, 100)],
            // Nothing earned: nothing allowed.
            [(1, 0), (1, 500), (1, 2000)],
        ]
        for row in rows { #expect(Self.violation(row, policy: policy) == nil, "\(row)") }
    }
}
