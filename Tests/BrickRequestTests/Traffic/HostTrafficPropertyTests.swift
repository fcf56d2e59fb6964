@testable import BrickRequestCore
import PropertyBased
import Testing

/// Random histories against one host's traffic machine (rate, pause, breaker, budget and
/// concurrency composed): attempts arrive, time passes, attempts end with random outcomes. A host
/// the server paused (`Retry-After`) admits nothing before the pause's end; the concurrency cap is
/// never passed; a caller left in line is in line (it leaves once, exactly).
@Suite("Host traffic: random histories", .timeLimit(.minutes(3)))
struct HostTrafficPropertyTests {
    /// 0: an attempt arrives (with a deadline when `detail` is even); 1: time passes (`detail`
    /// × 37 ms); 2: the oldest attempt in flight ends with outcome `detail % 5` (200, 429 with
    /// Retry-After, 503 with Retry-After, 500, a connection failure).
    typealias Event = (kind: Int, detail: Int)

    static func violation(_ events: [Event], cap: Int, rate: Double?) -> String? {
        let policy = HostPolicy(
            rate: rate.map { HostPolicy.Rate.perSecond($0) },
            maximumConcurrentRequests: cap,
            circuitBreaker: CircuitBreakerPolicy(failureRatio: 0.5, minimumRequests: 4, window: .seconds(5), breakDuration: .seconds(1))
        )
        var now = Duration.seconds(100)
        var host = HostTraffic(policy: policy, at: now)
        var inFlight: [HostTraffic.Progress] = []
        var pausedUntil = Duration.zero
        var waiter: UInt64 = 0
        var changes: [HostTraffic.Change] = []
        for (index, event) in events.enumerated() {
            switch event.kind {
            case 0:
                var progress = HostTraffic.Progress()
                waiter += 1
                let deadline: Duration? = event.detail % 2 == 0 ? now + .seconds(2) : nil
                switch host.admit(.first, progress: &progress, at: now, deadline: deadline, waiter: waiter, changes: &changes) {
                case .proceed:
                    if now < pausedUntil { return "event \(index): admitted at \(now), the host is paused until \(pausedUntil)" }
                    inFlight.append(progress)
                    if inFlight.count > cap { return "event \(index): \(inFlight.count) in flight, cap \(cap)" }
                case .wait(let until):
                    if until <= now { return "event \(index): told to wait until \(until), which is not later than \(now)" }
                    host.abandon(&progress, at: now, changes: &changes)
                case .queued:
                    if !host.leaveLine(waiter) { return "event \(index): a caller just queued is not in line" }
                    if host.leaveLine(waiter) { return "event \(index): a caller left the line twice" }
                    host.abandon(&progress, at: now, changes: &changes)
                case .refuse(.paused(let until)):
                    if until <= now { return "event \(index): refused for a pause that ended at \(until)" }
                case .refuse:
                    break
                }
            case 1:
                now += .milliseconds(Int64(event.detail) * 37)
            default:
                guard !inFlight.isEmpty else { continue }
                let progress = inFlight.removeFirst()
                let delay = Duration.milliseconds(Int64(100 + event.detail * 50))
                let observed: HostTraffic.Observed =
                    switch event.detail % 5 {
                    case 0: .status(200, retryAfter: nil)
                    case 1: .status(429, retryAfter: delay)
                    case 2: .status(503, retryAfter: delay)
                    case 3: .status(500, retryAfter: nil)
                    default: .failure(.connectionReset)
                    }
                if case .status(_, let retryAfter?) = observed { pausedUntil = max(pausedUntil, now + retryAfter) }
                if let handed = host.finished(observed, progress: progress, at: now, changes: &changes) {
                    return "event \(index): a slot handed to \(handed), but every caller left the line"
                }
            }
        }
        return nil
    }

    @Test("paused hosts admit nothing before the pause's end; the cap holds; the line is kept exactly")
    func histories() async {
        let events = zip(Gen.int(in: 0...2), Gen.int(in: 0...40)).array(of: 1...500)
        await propertyCheck(count: 300, input: events, Gen.int(in: 1...4), Gen.int(in: 0...2)) { raw, cap, shape in
            let rate: Double? = [nil, 5.0, 50.0][shape]
            let found = Self.violation(raw.map { Event(kind: $0.0, detail: $0.1) }, cap: cap, rate: rate)
            #expect(found == nil, "cap \(cap), rate \(String(describing: rate)): \(found ?? "")")
        }
    }

    @Test("regression rows")
    func rows() {
        let rows: [[Event]] = [
            // A 503 with Retry-After 150 ms: an arrival 111 ms later is held, one 148 ms later admitted.
            [(0, 0), (2, 2), (1, 3), (0, 0), (1, 1), (0, 0)],
            // The cap reached: the next caller queues and leaves.
            [(0, 0), (0, 0), (0, 0), (2, 0), (0, 0)],
        ]
        for row in rows { #expect(Self.violation(row, cap: 2, rate: nil) == nil, "\(row)") }
    }
}
