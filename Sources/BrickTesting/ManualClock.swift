import Glibc
import Synchronization

/// A clock whose time moves only when a test calls ``advance(by:)``.
///
/// Code under test sleeps on it (`try await clock.sleep(for: .seconds(5))`) and the test advances
/// it; nothing waits for real time. Sleepers and scheduled actions whose deadline is reached run in
/// deadline order.
///
/// A sleep that nobody ends is a test that hangs: when a sleeper has waited ``stallReport`` of real
/// time (30 s by default) without the clock reaching its deadline, the clock writes to standard
/// error what waits and for what, so the test's time limit fails with the reason beside it
/// ("nobody advanced the clock"). `Session.testing(stub)` without a clock uses an
/// ``ImmediateClock`` instead, whose sleeps return at once.
public final class ManualClock: Clock, Sendable {
    /// A point on a ``ManualClock``: the time advanced since the clock was created.
    public struct Instant: InstantProtocol, Sendable, Hashable, Comparable {
        /// Time since the clock's start.
        public var offset: Duration

        /// Creates an instant.
        ///
        /// - Parameter offset: Time since the clock's start.
        public init(offset: Duration) { self.offset = offset }

        /// The instant `duration` later.
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        /// Orders instants by offset.
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Waiter {
        var id: Int
        var deadline: Instant
        var action: @Sendable () -> Void
    }

    private struct State {
        var now = Instant(offset: .zero)
        var nextID = 0
        var waiters: [Waiter] = []
    }

    private let state = Lock(State())
    /// How long a sleeper waits, in real time, before the clock reports that nobody advances it.
    public let stallReport: Duration

    /// Creates a clock at offset zero.
    ///
    /// - Parameter stallReport: How long a sleeper may wait in real time before the clock writes to
    ///   standard error that nobody advanced it. Default 30 s.
    public init(stallReport: Duration = .seconds(30)) {
        self.stallReport = stallReport
        self.report = { message in _ = message.withCString { write(STDERR_FILENO, $0, strlen($0)) } }
    }

    /// A clock whose stall reports go to `report` instead of standard error (for its own tests).
    package init(stallReport: Duration, report: @escaping @Sendable (String) -> Void) {
        self.stallReport = stallReport
        self.report = report
    }

    private let report: @Sendable (String) -> Void

    /// The current instant.
    public var now: Instant { state.withLock { $0.now } }

    /// Zero: the clock has no granularity.
    public var minimumResolution: Duration { .zero }

    /// How many sleepers and scheduled actions are waiting.
    public var waiterCount: Int { state.withLock { $0.waiters.count } }

    /// Suspends until the clock is advanced to `deadline`.
    ///
    /// - Parameters:
    ///   - deadline: When to resume.
    ///   - tolerance: Ignored.
    /// - Throws: `CancellationError` when the task is cancelled first.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        let resumed = Lock(false)
        let (report, start) = (stallReport, now)
        // Cancelled when the sleep ends: if its own sleep ends first, the sleeper still waits.
        let watchdog = Task.detached { [self] in
            try await Task.sleep(for: report)
            let message =
                "ManualClock: a sleep until +\(deadline.offset) (slept at +\(start.offset)) has waited \(report) "
                + "of real time and the clock is still at +\(self.now.offset): nobody advanced it. Call "
                + "advance(by:) once the code under test waits (waiterCount > 0), or give the session an "
                + "ImmediateClock (Session.testing(stub) does by default).\n"
            self.report(message)
        }
        defer { watchdog.cancel() }
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                let resumeOnce: @Sendable () -> Void = {
                    if resumed.withLock({ flag in
                        defer { flag = true }
                        return !flag
                    }) {
                        continuation.resume()
                    }
                }
                schedule(id: id, at: deadline, resumeOnce)
                // Cancelled before the sleep was registered: `onCancel` ran first and found nothing
                // to end (a task cancelled as it started slept until the clock was advanced).
                if Task.isCancelled { removeWaiter(id)?() }
            }
        } onCancel: {
            removeWaiter(id)?()
        }
        try Task.checkCancellation()
    }

    /// Takes the waiter `id` out of line, returning its action (`nil` when it is not waiting).
    private func removeWaiter(_ id: Int) -> (@Sendable () -> Void)? {
        state.withLock { state in
            guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiters.remove(at: index).action
        }
    }

    /// Runs `action` when the clock reaches `deadline` (at once if it already has).
    ///
    /// - Parameters:
    ///   - deadline: When to run it.
    ///   - action: What to run, on the thread that advances the clock.
    public func schedule(at deadline: Instant, _ action: @escaping @Sendable () -> Void) {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        schedule(id: id, at: deadline, action)
    }

    private func schedule(id: Int, at deadline: Instant, _ action: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if deadline <= state.now { return true }
            state.waiters.append(Waiter(id: id, deadline: deadline, action: action))
            return false
        }
        if runNow { action() }
    }

    /// Moves time forward, running every sleeper and action whose deadline is reached, in order.
    ///
    /// - Parameter duration: How far to move (not negative).
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a ManualClock cannot go back in time")
        let target = state.withLock { $0.now.advanced(by: duration) }
        while true {
            let next = state.withLock { state -> Waiter? in
                guard
                    let index = state.waiters.indices.min(by: {
                        state.waiters[$0].deadline < state.waiters[$1].deadline
                    }),
                    state.waiters[index].deadline <= target
                else { return nil }
                let waiter = state.waiters.remove(at: index)
                state.now = max(state.now, waiter.deadline)
                return waiter
            }
            guard let next else { break }
            next.action()
        }
        state.withLock { $0.now = target }
    }
}
