import FoundationEssentials

/// The session's clock, type-erased: sleeps for retry delays and measures elapsed time.
package struct SessionClock: Sendable {
    /// The date at which ``elapsed`` read zero: a point on the clock turns into a date as
    /// `originDate + elapsed` (traffic control dates a pause's end so). The offline loops reckon
    /// dates from the same point on a real clock, so a pause's date means the same instant to a
    /// queue.
    package let originDate: Date
    package let sleep: @Sendable (Duration) async throws -> Void
    /// Time since the clock was wrapped.
    package let elapsed: @Sendable () -> Duration
    /// Sleeps until ``elapsed`` reaches the given value (a deadline, so time that passes between
    /// computing it and starting to sleep is not added to the wait).
    package let sleepUntilElapsed: @Sendable (Duration) async throws -> Void

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        originDate = Date()
        if clock is ContinuousClock {
            // The default clock, read on every request by traffic control: closures on the
            // concrete type (the generic ones go through witness tables, several times the cost).
            let origin = ContinuousClock.now
            sleep = { try await ContinuousClock().sleep(for: $0) }
            elapsed = { origin.duration(to: .now) }
            sleepUntilElapsed = { try await ContinuousClock().sleep(until: origin.advanced(by: $0), tolerance: nil) }
            return
        }
        let origin = clock.now
        sleep = { try await clock.sleep(for: $0) }
        elapsed = { origin.duration(to: clock.now) }
        sleepUntilElapsed = { try await clock.sleep(until: origin.advanced(by: $0), tolerance: nil) }
    }

    /// The date of a point on the clock.
    ///
    /// - Parameter elapsed: The point, as time since the clock was wrapped.
    /// - Returns: `originDate + elapsed`.
    package func date(at elapsed: Duration) -> Date {
        originDate.addingTimeInterval(elapsed.seconds)
    }
}
