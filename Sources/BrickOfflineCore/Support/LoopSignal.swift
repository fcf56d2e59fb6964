import BrickRequest
import Foundation
import Synchronization

/// How a processing loop sleeps and is woken: a wake-up that comes while the loop is busy is kept
/// for its next sleep, so none is lost; a sleep can also end at a deadline on the session's clock.
final class LoopSignal: Sendable {
    private struct State {
        var sleeper: CheckedContinuation<Void, Never>?
        var pending = false
        var stopped = false
    }

    private let state = Lock(State())
    private let idle = Atomic<Int>(0)

    /// How many times the loop went idle: suspended with no wake-up pending. For tests, a
    /// barrier: read it, cause something (a wake-up, a clock advance), and once it has grown the
    /// loop has handled that and found nothing more to do (nothing sent, nothing launched).
    package var idleCount: Int { idle.load(ordering: .acquiring) }

    /// Ends the current sleep, or the next one at once.
    func wake() {
        let sleeper = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.sleeper = nil }
            if state.sleeper == nil { state.pending = true }
            return state.sleeper
        }
        sleeper?.resume()
    }

    /// Ends every sleep from now on.
    func stop() {
        let sleeper = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.stopped = true
            defer { state.sleeper = nil }
            return state.sleeper
        }
        sleeper?.resume()
    }

    /// Sleeps until woken, or until the clock's elapsed time reaches `deadline` (`nil`: no deadline).
    func sleep(until deadline: Duration?, on clock: SessionClock) async {
        if let deadline, clock.elapsed() >= deadline { return }
        let timer: Task<Void, Never>? = deadline.map { deadline in
            Task { [weak self] in
                do { try await clock.sleepUntilElapsed(deadline) } catch { return }
                self?.wake()
            }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.pending || state.stopped {
                    state.pending = false
                    return true
                }
                state.sleeper = continuation
                idle.add(1, ordering: .releasing)
                return false
            }
            if now { continuation.resume() }
        }
        timer?.cancel()
    }
}

extension LoopSignal {
    /// Sleeps until woken, or until `date` (`nil`: no deadline) on the loop's clock.
    func sleep(until date: Date?, time: LoopTime) async {
        await sleep(until: date?.elapsed(since: time.origin), on: time.clock)
    }
}
