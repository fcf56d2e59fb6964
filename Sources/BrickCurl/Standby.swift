internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The standby side of a ``CurlDriver``'s lease: the watch on safe-point work, and the one thread
/// that waits to take the I/O over when a piece of work runs too long.
///
/// The standby sleeps one tick at a time while work is being run (and parks, at no cost, after
/// about 20 ms in which no work started); seeing the same piece of work at two consecutive ticks, it takes the
/// lease with one compare-and-exchange on ``watched``.
final class Standby: Sendable {
    private static let takenOver: UInt64 = 1 << 63
    /// While the leader runs a piece of safe-point work: its sequence number (never 0), with
    /// ``takenOver`` or-ed in once a standby took the lease. 0 otherwise.
    private let watched = Atomic<UInt64>(0)
    /// The sequence number of the last piece of work started, kept after it ends: how the standby
    /// tells a quiet tick from a busy one whose work happened between two looks.
    private let lastStarted = Atomic<UInt64>(0)
    /// Whether a standby thread exists (waiting, or started and about to).
    private let available = Atomic<Bool>(false)
    private let parked = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private let wake = DispatchSemaphore(value: 0)
    private let tick: timespec
    private let ticksBeforeParking: Int

    init(tickNanoseconds: UInt64) {
        tick = timespec(tv_sec: Int(tickNanoseconds / 1_000_000_000), tv_nsec: Int(tickNanoseconds % 1_000_000_000))
        ticksBeforeParking = max(2, Int(20_000_000 / tickNanoseconds))
    }

    /// The sequence number of the next piece of work: never 0, never with the taken-over bit.
    static func next(after sequence: UInt64) -> UInt64 {
        let next = (sequence &+ 1) & ~takenOver
        return next == 0 ? 1 : next
    }

    // MARK: Leader side

    /// Before running safe-point work: makes sure a standby thread exists.
    func ensureAvailable(start: () -> Bool) {
        if available.load(ordering: .relaxed) || stopped.load(ordering: .relaxed) { return }
        if available.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged, !start() {
            available.store(false, ordering: .relaxed)
        }
    }

    /// The leader starts a piece of work. Sequentially consistent, paired with ``park()``.
    func watch(_ sequence: UInt64) {
        lastStarted.store(sequence, ordering: .relaxed)
        watched.store(sequence, ordering: .sequentiallyConsistent)
        if parked.load(ordering: .sequentiallyConsistent),
            parked.exchange(false, ordering: .sequentiallyConsistent)
        {
            wake.signal()
        }
    }

    /// The leader finished the piece of work; returns whether it still holds the lease.
    func unwatch(_ sequence: UInt64) -> Bool {
        watched.compareExchange(expected: sequence, desired: 0, ordering: .acquiringAndReleasing).exchanged
    }

    /// The loop ended: the standby thread exits, and so does every leader demoted later.
    func stop() {
        stopped.store(true, ordering: .sequentiallyConsistent)
        if parked.exchange(false, ordering: .sequentiallyConsistent) { wake.signal() }
    }

    // MARK: Standby side

    /// A leader that lost the lease and finished its work offers to be the standby; `false` when
    /// there already is one (or the loop ended): the thread then exits.
    func enlist() -> Bool {
        !stopped.load(ordering: .relaxed)
            && available.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
    }

    /// Waits until a piece of work has run for a whole tick, then takes the lease: returns `true`
    /// when this thread is now the leader, `false` when the loop ended.
    func awaitTakeover() -> Bool {
        var lastSeen: UInt64 = 0
        var lastStartedSeen: UInt64 = 0
        var quietTicks = 0
        while !stopped.load(ordering: .relaxed) {
            if quietTicks >= ticksBeforeParking {
                park()
                quietTicks = 0
                lastSeen = 0
                continue
            }
            var request = tick
            var remaining = timespec()
            while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
            let seen = watched.load(ordering: .relaxed)
            if seen == 0 || seen & Self.takenOver != 0 {
                let started = lastStarted.load(ordering: .relaxed)
                quietTicks = started == lastStartedSeen ? quietTicks + 1 : 0
                lastStartedSeen = started
                lastSeen = 0
                continue
            }
            quietTicks = 0
            if seen != lastSeen {
                lastSeen = seen
                continue
            }
            // Acquire: the driver state the old leader wrote before this work is visible here.
            if watched.compareExchange(expected: seen, desired: seen | Self.takenOver, ordering: .acquiring).exchanged {
                // The old leader's `unwatch` now fails; clearing the mark readies the watch for
                // this thread's own work.
                watched.store(0, ordering: .relaxed)
                available.store(false, ordering: .relaxed)
                return true
            }
        }
        return false
    }

    /// Sleeps until the leader runs safe-point work again (or the loop ends).
    private func park() {
        parked.store(true, ordering: .sequentiallyConsistent)
        if watched.load(ordering: .sequentiallyConsistent) != 0 || stopped.load(ordering: .sequentiallyConsistent) {
            // Work started meanwhile: unless the leader already claimed the flag (and signals),
            // keep ticking.
            if parked.exchange(false, ordering: .sequentiallyConsistent) { return }
        }
        wake.wait()
    }
}
