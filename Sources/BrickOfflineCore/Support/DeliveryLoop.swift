import BrickRequest
import Foundation
import Synchronization

/// The delivery loop of a queue or a manager: the I/O shell around ``StateMachine``. One task
/// leases due entries and launches an attempt of each (a task per attempt), sleeps until the next
/// is due or it is woken (an add, an attempt's end, the store's wake-ups, a reachability change),
/// and stops as ``StateMachine`` documents.
package final class DeliveryLoop: Sendable {
    private struct State {
        var machine: StateMachine
        /// The loop's task, while it runs.
        var loop: Task<Void, Never>?
        /// What wakes it besides its own process (reachability, the store's wake-ups and polls).
        var wakeUps: [Task<Void, Never>] = []
        /// The task of each attempt under way, with the number it was launched under.
        var attempts: [OfflineEntry.ID: (serial: UInt64, task: Task<Void, Never>)] = [:]
        var launched: UInt64 = 0
        /// Stops waiting for the attempts under way to end.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Lock<State>
    private let signal = LoopSignal()
    /// The loop's clock: the session's, so a `ManualClock` drives its sleeps in tests.
    private let time: LoopTime
    private let reachability: @Sendable () -> AsyncStream<Void>

    /// - Parameter session: The session whose clock the loop sleeps on and whose reachability
    ///   changes wake it.
    /// - Parameters:
    ///   - session: The session whose reachability changes wake the loop.
    ///   - time: The owner's clock (the session's), whose dates the policy's `now()` gives: one
    ///     origin for the dates the loop sleeps until and those it stores.
    ///   - headOfLineAtCapOne: At a cap of 1, lease only the head of the queue (the manager).
    init(session: Session, time: LoopTime, headOfLineAtCapOne: Bool = false) {
        self.time = time
        self.reachability = { session.reachability.changes() }
        self.state = Lock(State(machine: StateMachine(headOfLineAtCapOne: headOfLineAtCapOne)))
    }

    /// How many times the loop went idle (``LoopSignal/idleCount``): a barrier for tests.
    var idleCount: Int { signal.idleCount }

    /// How many attempts run here.
    var runningCount: Int { state.withLock { $0.machine.running.count } }

    /// The lease the attempt of `id` holds now.
    func lease(of id: OfflineEntry.ID) -> UUID? { state.withLock { $0.machine.lease(of: id) } }

    /// Whether the attempt of `id` is to be handed back when it ends (a stop's grace period ended).
    func isHandingBack(_ id: OfflineEntry.ID) -> Bool { state.withLock { $0.machine.isHandingBack(id) } }

    /// Whether the loop takes entries now.
    var isRunning: Bool { state.withLock { $0.machine.phase == .running } }

    /// Whether an entry added for `notBefore` needs the loop started or woken (not while it
    /// sleeps until an earlier date).
    func needsWake(forEntryDue notBefore: Date) -> Bool {
        state.withLock { $0.machine.needsWake(forEntryDue: notBefore) }
    }

    /// Starts the loop, or wakes it; nothing while it stops or once closed. With
    /// `clearingPauses`, every paused entry is made due before the next lease.
    func start(_ policy: some DeliveryPolicy, clearingPauses: Bool = false) {
        let start = state.withLock { $0.machine.startRequested(clearingPauses: clearingPauses) }
        switch start {
        case .ignore: return
        case .wake: signal.wake()
        case .startLoop:
            // Made under the lock: a stop that follows at once finds the task to wait for.
            state.withLock { state in
                state.loop = Task { await self.run(policy) }
                state.wakeUps =
                    [Task { await self.watchReachability(policy) }]
                    + StoreWakeUps.start(store: policy.store, queue: policy.name, signal: signal)
            }
        }
    }

    /// Ends the current sleep of the loop (or its next one).
    func wake() { signal.wake() }

    /// Stops taking entries, lets the attempts under way end for up to `gracePeriod` (real time),
    /// then cancels the rest and hands their entries back. Returns once the loop's task has ended
    /// and no attempt runs; ``start(_:)`` takes entries again (unless closed).
    func stop(gracePeriod: Duration) async {
        let (loop, wakeUps, drained) = state.withLock { state in
            let drained = state.machine.stopRequested()
            defer {
                state.loop = nil
                state.wakeUps = []
            }
            return (state.loop, state.wakeUps, drained)
        }
        wakeUps.forEach { $0.cancel() }
        let deadline = Task {
            try? await Task.sleep(for: gracePeriod)
            if Task.isCancelled { return }
            let late = self.state.withLock { state in
                state.machine.graceExpired().compactMap { state.attempts[$0]?.task }
            }
            late.forEach { $0.cancel() }
            // A store call that outlasts the grace period too (a database gone) is cancelled.
            loop?.cancel()
        }
        // The loop is not cancelled: a store call under way ends normally, and what it leased
        // goes back. Woken, it sees the stop at its next turn.
        signal.wake()
        await loop?.value
        if !drained {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.machine.running.isEmpty { return true }
                    state.stopWaiters.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }
        deadline.cancel()
        state.withLock { $0.machine.stopEnded() }
    }

    /// Closes the loop for ever: the loop and its wake-ups end; with `cancellingAttempts`, the
    /// attempts under way are cancelled too (their outcomes still recorded), else they run to
    /// their end.
    func close(cancellingAttempts: Bool) {
        let tasks = state.withLock { state in
            state.machine.closed()
            defer {
                state.loop = nil
                state.wakeUps = []
            }
            return [state.loop].compactMap { $0 } + state.wakeUps
                + (cancellingAttempts ? state.attempts.values.map(\.task) : [])
        }
        tasks.forEach { $0.cancel() }
        signal.stop()
    }

    /// Forgets every attempt under way and cancels them (their owner ignores their outcomes).
    func abandonAll() {
        let tasks = state.withLock { state in
            state.machine.abandonAll().compactMap { state.attempts.removeValue(forKey: $0)?.task }
        }
        tasks.forEach { $0.cancel() }
        signal.wake()
    }

    private func run(_ policy: some DeliveryPolicy) async {
        while true {
            switch state.withLock({ $0.machine.turn(cap: policy.cap) }) {
            case .exit:
                return
            case .sleepUntilWoken:
                // Woken when an attempt ends.
                await sleep(until: nil)
                continue
            case .lease(let lease):
                await policy.willLease()
                let leased: [OfflineEntry]
                var paused = false
                do {
                    paused = try await policy.store.isPaused(queue: policy.name)
                    leased = paused ? [] : try await take(lease, policy)
                } catch {
                    guard isRunning else { continue }
                    policy.report(storeFailure: "cannot lease entries: \(error)")
                    await sleep(until: policy.now().addingTimeInterval(policy.leaseRetryInterval.seconds))
                    continue
                }
                if leased.isEmpty {
                    let anyRunning = runningCount > 0
                    // A paused queue has nothing due for this loop: it sleeps until woken (the
                    // store's wake-ups, its poll) and looks again.
                    let due = paused ? nil : await policy.idle(anyRunning: anyRunning, headOfLine: lease.headOfLine)
                    let idle = state.withLock {
                        $0.machine.leasedNothing(due: due, now: policy.now(), storeWakes: policy.store.pollInterval != nil)
                    }
                    if case .sleep(let until) = idle { await sleep(until: until) }
                    continue
                }
                let held = leased.compactMap { entry in entry.lease.map { (id: entry.id, lease: $0.token) } }
                let byID = Dictionary(leased.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
                let decided = state.withLock { $0.machine.leased(held, cap: policy.cap) }
                for id in decided.launch { if let entry = byID[id] { launch(entry, policy) } }
                for id in decided.handBack {
                    if let entry = byID[id] { await handBack(entry, policy, reason: "not attempted: taken as processing stopped or over the cap") }
                }
            }
        }
    }

    /// Takes a lease: the head of the queue, or up to `limit` due entries; paused entries made
    /// due first when asked.
    private func take(_ lease: StateMachine.Lease, _ policy: some DeliveryPolicy) async throws -> [OfflineEntry] {
        let store = policy.store
        if lease.clearingPauses {
            do {
                try await store.clearPauses(queue: policy.name, now: policy.now())
            } catch {
                policy.report(storeFailure: "cannot make the paused entries due: \(error)")
            }
        }
        if lease.headOfLine {
            return try await store.leaseHead(queue: policy.name, now: policy.now(), for: policy.leaseDuration).map { [$0] } ?? []
        }
        return try await store.lease(queue: policy.name, limit: lease.limit, cap: policy.cap, now: policy.now(), for: policy.leaseDuration)
    }

    /// Sleeps until woken or `date` (an add for later than `date` needs no wake-up: the loop
    /// reads the store again then).
    private func sleep(until date: Date?) async {
        state.withLock { $0.machine.sleeping(until: date) }
        await signal.sleep(until: date, time: time)
        state.withLock { $0.machine.woke() }
    }

    private func launch(_ entry: OfflineEntry, _ policy: some DeliveryPolicy) {
        // Made under the lock: it is found there by a stop's grace period as soon as it runs.
        state.withLock { state in
            state.launched += 1
            let serial = state.launched
            state.attempts[entry.id] = (serial, Task {
                await policy.attempt(entry)
                if self.isHandingBack(entry.id) {
                    // Not in this task: it was cancelled, and a store refuses a cancelled caller.
                    await Task {
                        await self.handBack(entry, policy, reason: "handed back when processing stopped")
                    }.value
                }
                let waiters = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
                    // Only its own: an abandoned attempt's entry may run again under a new task.
                    guard state.attempts[entry.id]?.serial == serial else { return [] }
                    state.attempts[entry.id] = nil
                    guard state.machine.attemptEnded(entry.id) else { return [] }
                    defer { state.stopWaiters = [] }
                    return state.stopWaiters
                }
                self.signal.wake()
                waiters.forEach { $0.resume() }
            })
        }
    }

    /// Releases an entry's lease without recording an attempt: due again as it was, for any worker.
    private func handBack(_ entry: OfflineEntry, _ policy: some DeliveryPolicy, reason: String) async {
        guard let lease = lease(of: entry.id) ?? entry.lease?.token else { return }
        let now = policy.now()
        do {
            let held = try await policy.store.reschedule(
                entry.id,
                lease: lease,
                notBefore: min(entry.notBefore, now),
                attempt: OfflineEntry.AttemptRecord(date: now, status: nil, error: reason),
                countsAttempt: false
            )
            if !held { policy.report(storeFailure: "the lease of \(entry.id) was lost before it was handed back") }
        } catch {
            policy.report(storeFailure: "cannot hand back \(entry.id): \(error)")
        }
    }

    /// When reachability changes, paused entries are looked at at once, not at the end of their pause.
    private func watchReachability(_ policy: some DeliveryPolicy) async {
        for await _ in reachability() {
            if Task.isCancelled { return }
            policy.reachabilityChanged()
            if state.withLock({ $0.machine.reachabilityChanged() }) { signal.wake() }
        }
    }
}
