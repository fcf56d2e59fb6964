import BrickRequest
import Foundation
import Synchronization

/// Hands events to every subscriber; keeps the last 1,000 for the first one while there is none.
final class EventBroadcaster<Event: Sendable>: Sendable {
    private struct State {
        var subscribers: [UUID: AsyncStream<Event>.Continuation] = [:]
        var backlog: [Event] = []
        var finished = false
    }

    private let state = Lock(State())

    func stream() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(1000))
        let id = UUID()
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        let backlog = state.withLock { state -> [Event]? in
            if state.finished { return nil }
            state.subscribers[id] = continuation
            defer { state.backlog = [] }
            return state.backlog
        }
        guard let backlog else {
            continuation.finish()
            return stream
        }
        backlog.forEach { continuation.yield($0) }
        return stream
    }

    func emit(_ event: Event) {
        let subscribers = state.withLock { state -> [AsyncStream<Event>.Continuation] in
            if state.subscribers.isEmpty && !state.finished {
                state.backlog.append(event)
                if state.backlog.count > 1000 { state.backlog.removeFirst(state.backlog.count - 1000) }
            }
            return Array(state.subscribers.values)
        }
        subscribers.forEach { $0.yield(event) }
    }

    func finish() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        subscribers.forEach { $0.finish() }
    }
}

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

extension LoopSignal {
    /// Sleeps until woken, or until `date` (`nil`: no deadline) on the loop's clock.
    func sleep(until date: Date?, time: LoopTime) async {
        await sleep(until: date?.elapsed(since: time.origin), on: time.clock)
    }
}

/// Runs a call on `store` for queue `name`, turning its failure into a ``BrickError`` with code
/// `storage` that names the caller (`"offline queue uploads"`): what the queue's and the manager's
/// public methods throw.
func storeCall<T: Sendable>(
    _ store: any OfflineStore,
    queue name: String,
    caller: String,
    _ call: @Sendable (any OfflineStore, String) async throws -> T
) async throws(BrickError) -> T {
    do {
        return try await call(store, name)
    } catch let error as BrickError {
        throw error
    } catch {
        throw BrickError(.storage, message: "\(caller): \(error)", underlying: error)
    }
}

/// What wakes a processing loop besides its own process: the store's wake-ups (another process
/// made work) and, for a store shared by several processes, a poll in case one was missed. Both
/// run on real time, never on a test's manual clock.
enum StoreWakeUps {
    /// Starts the tasks that wake `signal` for `queue` of `store`; cancel them to stop.
    static func start(store: any OfflineStore, queue: String, signal: LoopSignal) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        if let wakeUps = store.wakeUps(queue: queue) {
            tasks.append(Task { [weak signal] in
                for await _ in wakeUps {
                    guard let signal else { return }
                    signal.wake()
                }
            })
        }
        if let interval = store.pollInterval {
            tasks.append(Task { [weak signal] in
                while !Task.isCancelled {
                    do { try await Task.sleep(for: interval) } catch { return }
                    guard let signal else { return }
                    signal.wake()
                }
            })
        }
        return tasks
    }
}
