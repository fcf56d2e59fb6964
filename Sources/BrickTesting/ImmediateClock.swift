import Synchronization

/// A clock whose sleeps return at once: its time jumps forward by each sleep, which it records.
///
/// What `Session.testing(_:configuration:reachability:)` runs on by default, so that an endpoint's
/// retries (5 attempts, 5 s apart, unless it says otherwise) end at once in a test instead of
/// waiting for a clock nobody advances. Assert the waits with ``sleeps``:
///
/// ```swift
/// let clock = ImmediateClock()
/// let session = Session.testing(stub, clock: clock)
/// _ = try? await GetUser(userID: "1", session: session).value     // a 503 every time
/// #expect(clock.sleeps == [.seconds(5), .seconds(5), .seconds(5), .seconds(5)])
/// ```
///
/// To hold a wait open and look at what happens meanwhile, use a ``ManualClock`` instead.
public final class ImmediateClock: Clock, Sendable {
    /// A point on an ``ImmediateClock``: the time slept since the clock was created.
    public typealias Instant = ManualClock.Instant

    private struct State {
        var now = Instant(offset: .zero)
        var sleeps: [Duration] = []
    }

    private let state = Mutex(State())

    /// Creates a clock at offset zero.
    public init() {}

    /// The current instant: the sum of every sleep so far.
    public var now: Instant { state.withLock { $0.now } }

    /// Zero: the clock has no granularity.
    public var minimumResolution: Duration { .zero }

    /// Every sleep asked of the clock, in order (a sleep until an instant already past counts as zero).
    public var sleeps: [Duration] { state.withLock { $0.sleeps } }

    /// Returns at once, the clock's time moved to `deadline` (if it is later); throws
    /// `CancellationError` when the calling task is cancelled.
    ///
    /// - Parameters:
    ///   - deadline: The instant to move to.
    ///   - tolerance: Ignored.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try Task.checkCancellation()
        state.withLock { state in
            let slept = max(.zero, deadline.offset - state.now.offset)
            state.sleeps.append(slept)
            if deadline > state.now { state.now = deadline }
        }
        // Let other tasks run, as a real sleep would.
        await Task.yield()
    }
}
