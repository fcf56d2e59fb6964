/// The session's clock, type-erased: sleeps for retry delays and measures elapsed time.
package struct SessionClock: Sendable {
    package let sleep: @Sendable (Duration) async throws -> Void
    /// Time since the clock was wrapped.
    package let elapsed: @Sendable () -> Duration
    /// Sleeps until ``elapsed`` reaches the given value (a deadline, so time that passes between
    /// computing it and starting to sleep is not added to the wait).
    package let sleepUntilElapsed: @Sendable (Duration) async throws -> Void

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        let origin = clock.now
        sleep = { try await clock.sleep(for: $0) }
        elapsed = { origin.duration(to: clock.now) }
        sleepUntilElapsed = { try await clock.sleep(until: origin.advanced(by: $0), tolerance: nil) }
    }
}
