@testable import BrickRequestCore
import Testing

/// The session clock over `ContinuousClock`, which reads the system clock directly on Linux.
// 3 minutes: twenty sleeps of at most 4 ms each, but each wake needs a cooperative-pool thread,
// and a whole run beside a second build kept them waiting past a minute (2026-11-29).
@Suite("Session clock", .timeLimit(.minutes(3)))
struct SessionClockTests {
    @Test("a sleep until a point on the clock never wakes before elapsed() reaches it")
    func sleepUntilElapsed() async throws {
        let clock = SessionClock(ContinuousClock())
        for step in 1...20 {
            let deadline = clock.elapsed() + .microseconds(200 * step)
            try await clock.sleepUntilElapsed(deadline)
            let woke = clock.elapsed()
            #expect(woke >= deadline, "woke at \(woke), before \(deadline)")
        }
    }

    @Test("elapsed() measures what ContinuousClock measures")
    func agreesWithContinuousClock() async {
        let clock = SessionClock(ContinuousClock())
        let start = ContinuousClock.now
        let before = clock.elapsed()
        // Until ContinuousClock has measured 20 ms (an event, not a sleep).
        while start.duration(to: .now) < .milliseconds(20) { await Task.yield() }
        let measured = clock.elapsed() - before
        let reference = start.duration(to: .now)
        #expect(measured >= .milliseconds(20))
        // Both read the same clock: the difference is the time between the reads, not drift.
        #expect(abs((reference - measured).signedNanoseconds) < 5_000_000, "\(measured) against \(reference)")
    }
}
