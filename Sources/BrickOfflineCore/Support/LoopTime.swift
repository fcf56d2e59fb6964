import BrickRequest
import Foundation
import Synchronization

extension Date {
    /// This date as a deadline on a clock that started at `origin`.
    func elapsed(since origin: Date) -> Duration {
        .seconds(min(timeIntervalSince(origin), 1e12))
    }
}

/// A processing loop's wall clock: the date its session's clock started at plus that clock's
/// elapsed time, so that a test's `ManualClock` drives pauses, schedules and time limits.
struct LoopTime: Sendable {
    /// The date at which the session's clock read zero: now, less what it has counted since the
    /// session was made (a queue made an hour after its session must not run an hour ahead, or
    /// the dates it stores mean nothing to the other processes sharing the store). On a real
    /// clock this is the session's ``SessionClock/originDate``, which traffic control dates its
    /// pauses by; on a `ManualClock` advanced before the queue was made, it is not.
    let origin: Date
    let clock: SessionClock

    init(clock: SessionClock) {
        self.clock = clock
        self.origin = Date().addingTimeInterval(-clock.elapsed().seconds)
    }

    /// The current date, as the loop reckons it.
    func now() -> Date { origin.addingTimeInterval(clock.elapsed().seconds) }
}
