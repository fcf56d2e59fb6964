@testable import BrickRequestCore
import PropertyBased
import Testing

/// Random histories against the retry engine, the model of the house's pure decisions: any run of
/// outcomes (statuses with and without `Retry-After`, transport failures sent or not), reachability
/// and attempt durations, under random configurations. Never more retries than allowed; never a
/// wait that passes the call's time limit; never a retry of a request whose bytes went out when it
/// is not idempotent; a `Retry-After` obeyed is waited out in full; parking spends no attempt and
/// happens only while the destination is unreachable.
@Suite("Retry engine: random histories", .timeLimit(.minutes(3)))
struct RetryEnginePropertyTests {
    static let kinds: [TransportError.Kind] = [.cannotConnect, .connectionReset, .timedOut, .notConnected, .tls, .invalidResponse]

    static func violation(_ steps: [(Int, Int, Int)], maxRetries: Int, idempotent: Bool, limit: Int?, exponential: Bool) -> String? {
        let configuration = AutoRetryConfiguration(
            breakTime: .milliseconds(200),
            maxRetryCount: maxRetries,
            backoff: exponential ? .exponential(multiplier: 2, max: .seconds(5)) : .constant,
            maxTotalDuration: limit.map { .milliseconds($0) }
        )
        var engine = RetryEngine(configuration: configuration, isIdempotent: idempotent, random: { $0 / 2 })
        var elapsed = Duration.zero
        var retries = 0
        for (index, (outcomeCode, took, reach)) in steps.enumerated() {
            elapsed += .milliseconds(took)
            let retryAfter: Duration? = outcomeCode % 3 == 0 ? .milliseconds(100 * (outcomeCode % 7)) : nil
            let sent = outcomeCode % 2 == 0
            let outcome: RetryEngine.Outcome =
                outcomeCode < 20
                ? .response(status: [200, 404, 429, 500, 503][outcomeCode % 5], retryAfter: retryAfter)
                : .failure(TransportError(kinds[outcomeCode % kinds.count], message: "test", requestBytesSent: sent))
            let reachable: Bool? = [true, false, nil][reach % 3]
            let before = engine.retryCount
            let action = engine.attemptFinished(outcome, elapsed: elapsed, isReachable: reachable)
            let at = "step \(index) (\(outcome), reachable \(String(describing: reachable)), elapsed \(elapsed))"
            switch action {
            case .deliver:
                return nil
            case .park:
                if reachable != false { return "\(at): parked while the destination is not known unreachable" }
                if engine.retryCount != before { return "\(at): parking spent an attempt" }
            case .retry, .retryAfter:
                retries += 1
                let delay: Duration = if case .retryAfter(let delay) = action { delay } else { .zero }
                if delay < .zero { return "\(at): a negative delay" }
                if retries > maxRetries { return "\(at): retry \(retries) of \(maxRetries)" }
                if let limit, elapsed + delay > .milliseconds(limit) { return "\(at): waits past the time limit \(limit) ms" }
                if case .failure(let error) = outcome, error.requestBytesSent, !idempotent {
                    return "\(at): retried a non-idempotent request whose bytes went out"
                }
                if case .response(_, let after?) = outcome, delay < after { return "\(at): waited \(delay), Retry-After \(after)" }
                elapsed += delay
            }
        }
        return nil
    }

    @Test("retries, time limits, unknown outcomes, Retry-After and parking hold in any history")
    func histories() async {
        let steps = zip(Gen.int(in: 0...39), Gen.int(in: 0...3000), Gen.int(in: 0...2)).array(of: 1...40)
        await propertyCheck(count: 400, input: steps, Gen.int(in: 0...6), Gen.int(in: 0...5), Gen.int(in: 0...3)) { raw, retries, limitShape, shape in
            let limit: Int? = [nil, 1000, 5000, 20_000, 60_000, 300][limitShape]
            let found = Self.violation(raw, maxRetries: retries, idempotent: shape % 2 == 0, limit: limit, exponential: shape >= 2)
            #expect(found == nil, "retries \(retries), limit \(String(describing: limit)), shape \(shape): \(found ?? "")")
        }
    }
}
