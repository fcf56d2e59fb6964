import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
#if canImport(SwiftOverlayShims)
// `timespec`'s fields can resolve to the standard library's copy of the C declaration (in this
// module), depending on build order: imported, so `tv_sec` is visible either way.
import SwiftOverlayShims
#endif

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
            #if os(Linux)
            // `ContinuousClock` is `CLOCK_BOOTTIME` on Linux: read directly, the time costs a
            // third of going through the clock's instants. Read before the clock's origin, so
            // that a sleep until `origin + x` never wakes with `elapsed()` below `x`.
            let originNanoseconds = Self.bootTimeNanoseconds()
            #endif
            let origin = ContinuousClock.now
            sleep = { try await ContinuousClock().sleep(for: $0) }
            #if os(Linux)
            elapsed = { .nanoseconds(Self.bootTimeNanoseconds() &- originNanoseconds) }
            #else
            elapsed = { origin.duration(to: .now) }
            #endif
            sleepUntilElapsed = { try await ContinuousClock().sleep(until: origin.advanced(by: $0), tolerance: nil) }
            return
        }
        let origin = clock.now
        sleep = { try await clock.sleep(for: $0) }
        elapsed = { origin.duration(to: clock.now) }
        sleepUntilElapsed = { try await clock.sleep(until: origin.advanced(by: $0), tolerance: nil) }
    }

    #if os(Linux)
    /// `CLOCK_BOOTTIME`, the clock `ContinuousClock` reads on Linux, in nanoseconds.
    private static func bootTimeNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_BOOTTIME, &time)
        return Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }
    #endif

    /// The date of a point on the clock.
    ///
    /// - Parameter elapsed: The point, as time since the clock was wrapped.
    /// - Returns: `originDate + elapsed`.
    package func date(at elapsed: Duration) -> Date {
        originDate.addingTimeInterval(elapsed.seconds)
    }
}
