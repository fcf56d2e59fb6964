/// The session's clock, type-erased: sleeps for retry delays and measures elapsed time.
struct SessionClock: Sendable {
    let sleep: @Sendable (Duration) async throws -> Void
    /// Time since the clock was wrapped.
    let elapsed: @Sendable () -> Duration

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        let origin = clock.now
        sleep = { try await clock.sleep(for: $0) }
        elapsed = { origin.duration(to: clock.now) }
    }
}
