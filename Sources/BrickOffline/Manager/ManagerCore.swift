// Over 450 lines: the manager's loop, stop and attempt in one type until the shared delivery loop (issue 41, part 1) takes the loop out.
import BrickRequest
import Foundation
import Logging
import Synchronization

/// The engine of an ``OfflineRequestManager``: the submission loop, the running attempts with
/// their time limits, the batch's counts and progress.
final class ManagerCore: Sendable {
    struct Settings {
        var cap = 10
        var timeLimit: Duration = .seconds(120)
        var submissionInterval: Duration = .seconds(10)
        var delegate = WeakDelegate(nil)
        /// How long a lease lasts before another worker may take the entry (extended while it
        /// runs); `nil`: the store's own ``OfflineStore/leaseDuration``.
        var leaseDuration: Duration?
    }

    /// A stored request read back.
    struct Pending {
        var entry: OfflineEntry
        var request: any OfflineRequest
    }

    private struct Running {
        var progress: Double = 0
        var deadline: Duration
        var generation: Int
        /// The lease the attempt holds now (a newer one is adopted if the entry is leased again).
        var lease: UUID
        /// The task performing the request, once it runs.
        var work: Task<Void, Never>?
    }

    private struct State {
        var loop: Task<Void, Never>?
        var watch: [Task<Void, Never>] = []
        var stopped = false
        /// Outcomes whose store write and events are under way.
        var settling = 0
        /// Closed by ``close()``: no more requests are taken.
        var closed = false
        var running: [OfflineEntry.ID: Running] = [:]
        var completed = 0
        var outstanding = 0
        /// Whether `outstanding` holds the store's count yet (read once, before this process adds).
        var outstandingLoaded = false
        var progress: Double = 1
        /// Bumped by `clearAll`: attempts of an older generation are ignored when they end.
        var generation = 0
        var decoders: [String: @Sendable (Data) throws -> any OfflineRequest] = [:]
        /// Callers of `stop(gracePeriod:)` waiting for the running attempts to end.
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
        /// A `stop(gracePeriod:)` reached its deadline: nobody waits for the attempts any more.
        var drainDeadlinePassed = false
    }

    let name: String
    let store: any OfflineStore
    let session: Session
    let settings = Lock(Settings())
    let events = EventBroadcaster<OfflineRequestEvent>()
    /// Wakes ``waitUntilEmpty()`` after each outcome (its own stream: a subscription to ``events``
    /// would take the backlog kept for the user's first subscriber).
    private let settled = EventBroadcaster<Void>()
    /// The public manager, for the delegate's calls (set right after it is made).
    let ownerBox = Lock(WeakManager(nil))
    var owner: WeakManager { ownerBox.withLock { $0 } }
    private let state = Lock(State())
    private let signal = LoopSignal()
    /// How many times the loop went idle (``LoopSignal/idleCount``): a barrier for tests.
    var idleCount: Int { signal.idleCount }
    /// The loop's clock: the session's, so a `ManualClock` drives time limits and pauses in tests.
    private let time: LoopTime
    var leaseDuration: Duration { settings.withLock { $0.leaseDuration } ?? store.leaseDuration }

    init(name: String, store: any OfflineStore, session: Session) {
        self.name = name
        self.store = store
        self.session = session
        self.time = LoopTime(clock: session.clock)
    }

    func now() -> Date { time.now() }

    /// Runs a store call, turning its failure into a ``BrickError`` with code `storage`.
    func storeCall<T: Sendable>(_ call: @Sendable (any OfflineStore, String) async throws -> T) async throws(BrickError) -> T {
        try await BrickOffline.storeCall(store, queue: name, caller: "offline request manager \(name)", call)
    }

    // MARK: - Types and payloads

    private struct Envelope: Codable {
        var kind: String
        var request: Data
    }

    /// Registers a type; with `starting`, also starts processing: stored requests of its kind,
    /// waiting for it since they were read back, are due at once.
    func register<Request: OfflineRequest>(_ type: Request.Type, starting: Bool) {
        state.withLock { $0.decoders[Request.kind] = { try JSONDecoder().decode(Request.self, from: $0) } }
        guard starting else { return }
        Task { [self] in await makePausedDue() }
        start()
    }

    private func isRegistered(_ kind: String) -> Bool {
        state.withLock { $0.decoders[kind] != nil }
    }

    private func payload(_ request: any OfflineRequest) throws(BrickError) -> Data {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return try encoder.encode(Envelope(kind: type(of: request).kind, request: encoder.encode(request)))
        } catch {
            throw BrickError(.invalidRequest, message: "cannot encode \(type(of: request).kind)", underlying: error)
        }
    }

    /// Why a stored entry cannot be read back.
    private enum Unreadable: Error {
        /// Its kind is not registered (yet): it waits, neither attempted nor set aside.
        case unregistered(kind: String)
        /// It can never be read: set aside with the reason.
        case damaged(reason: String)
    }

    private func decode(_ entry: OfflineEntry) -> Result<any OfflineRequest, Unreadable> {
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: entry.payload) else {
            return .failure(.damaged(reason: "the stored entry cannot be read"))
        }
        guard let decoder = state.withLock({ $0.decoders[envelope.kind] }) else {
            return .failure(.unregistered(kind: envelope.kind))
        }
        do {
            return .success(try decoder(envelope.request))
        } catch {
            return .failure(.damaged(reason: "\(envelope.kind) no longer decodes: \(error)"))
        }
    }

    // MARK: - Store writes

    /// A store call whose failure is reported (logged, and a ``OfflineRequestEvent/storeFailed(_:)``
    /// event), never dropped; returns the call's result, `nil` when it failed.
    @discardableResult
    func reporting<T: Sendable>(
        _ what: String,
        _ call: @Sendable (any OfflineStore, String) async throws -> T
    ) async -> T? {
        do {
            return try await call(store, name)
        } catch {
            // A call cut short because the manager is being shut down is not a store failure.
            if isStopped { return nil }
            report("cannot \(what): \(error)")
            return nil
        }
    }

    /// A write under a lease: `false` from the store means the lease was lost, which is reported.
    private func leasedWrite(_ what: String, _ id: OfflineEntry.ID, _ call: @Sendable (any OfflineStore) async throws -> Bool) async {
        let held = await reporting(what) { store, _ in try await call(store) }
        if held == false { report("cannot \(what) \(id): its lease was lost (it was leased again meanwhile)") }
    }

    /// Makes every paused request due now (kept ones, vetoed ones, those waiting for their type)
    /// and wakes the loop: when reachability changes, or a type is registered.
    private func makePausedDue() async {
        await reporting("make the paused requests due") { store, queue in try await store.clearPauses(queue: queue, now: self.now()) }
        wake()
    }

    /// How long a stored request of a kind not registered yet is paused; `register` ends it at once.
    private static let unregisteredPause: Duration = .seconds(3600)

    private func report(_ failure: String) {
        session.logger.warning("offline store failed", metadata: ["brick.manager": "\(name)", "error.message": "\(failure)"])
        events.emit(.storeFailed(failure))
    }

    // MARK: - Queueing

    func queue(_ request: any OfflineRequest) async throws(BrickError) -> OfflineEntry.ID {
        if state.withLock({ $0.closed }) {
            throw BrickError(.invalidRequest, message: "offline request manager \(name) is closed; make a new one on its store to queue requests")
        }
        let draft = try draft(request)
        await loadOutstanding()
        // Counted before it is stored: the loop may start it as soon as it is.
        state.withLock { $0.outstanding += 1 }
        let ids: [OfflineEntry.ID]
        do {
            ids = try await storeCall { store, _ in try await store.add([draft], dedupe: .reject) }
        } catch {
            state.withLock { $0.outstanding = max(0, $0.outstanding - 1) }
            throw error
        }
        updateProgress()
        start()
        return ids.first ?? draft.id
    }

    /// The entry ``queue(_:)`` stores for `request`, checked (the queue's name) and encoded.
    func draft(_ request: any OfflineRequest) throws(BrickError) -> OfflineEntry.Draft {
        do {
            try OfflineEntry.checkQueueName(name)
        } catch {
            throw BrickError(.invalidRequest, message: "offline request manager: \(error.message)", underlying: error)
        }
        return OfflineEntry.Draft(queue: name, payload: try payload(request), createdAt: now())
    }

    func pending() async throws(BrickError) -> [Pending] {
        let entries = try await storeCall { store, queue in try await store.list(queue: queue) }
        return entries.filter { $0.lease == nil }.compactMap { entry in
            if case .success(let request) = decode(entry) { return Pending(entry: entry, request: request) }
            return nil
        }
    }

    func modifyPending(_ transform: @Sendable ([any OfflineRequest]) -> [any OfflineRequest]) async throws(BrickError) {
        let waiting = try await pending()
        let replacements = transform(waiting.map(\.request))
        var drafts: [OfflineEntry.Draft] = []
        for (index, request) in replacements.enumerated() {
            // A replacement keeps the time its first original was queued.
            let createdAt = waiting.indices.contains(index) ? waiting[index].entry.createdAt : now()
            drafts.append(OfflineEntry.Draft(queue: name, payload: try payload(request), createdAt: createdAt, notBefore: now()))
        }
        let ids = waiting.map(\.entry.id)
        let replacementDrafts = drafts
        let replaced = try await storeCall { store, queue in
            try await store.replacePending(queue: queue, ids: ids, with: replacementDrafts)
        }
        guard replaced else {
            throw BrickError(.storage, message: "a pending request started or was removed meanwhile; nothing was changed")
        }
        state.withLock { $0.outstanding = max(0, $0.outstanding + replacementDrafts.count - ids.count) }
        updateProgress()
        start()
        settled.emit(())
    }

    func clearAll() async throws(BrickError) {
        let abandoned = state.withLock { state -> [Task<Void, Never>] in
            state.generation += 1
            defer { state.running = [:] }
            state.completed = 0
            state.outstanding = 0
            return state.running.values.compactMap(\.work)
        }
        // Abandoned: told to stop, and whatever they end with is ignored.
        abandoned.forEach { $0.cancel() }
        try await storeCall { store, queue in try await store.removeAll(queue: queue) }
        updateProgress()
        settled.emit(())
    }

    func clearStale(olderThan age: Duration) async throws(BrickError) {
        let limit = now().addingTimeInterval(-age.seconds)
        let stale = try await storeCall { store, queue in try await store.list(queue: queue) }
            .filter { $0.lease == nil && $0.createdAt < limit }
        try await storeCall { store, _ in try await store.setAside(stale.map(\.id), reason: "stale", now: self.now()) }
        state.withLock { $0.outstanding = max(0, $0.outstanding - stale.count) }
        updateProgress()
        settled.emit(())
    }

    /// Reads the store's count into `outstanding` once, before this process adds anything (every
    /// add waits for it), so that no entry is counted twice; from then on, adds and ends count.
    private func loadOutstanding() async {
        guard !state.withLock({ $0.outstandingLoaded }) else { return }
        let count = await reporting("count the stored requests") { store, queue in try await store.count(queue: queue) } ?? 0
        state.withLock { state in
            guard !state.outstandingLoaded else { return }
            state.outstandingLoaded = true
            state.outstanding = count
        }
        updateProgress()
    }

    // MARK: - The submission loop

    func start() {
        let startLoop = state.withLock { !$0.stopped && $0.loop == nil }
        signal.wake()
        guard startLoop else { return }
        let loop = Task { [self] in
            await loadOutstanding()
            await run()
        }
        let watch = Task { [self] in
            for await _ in session.reachability.changes() {
                if state.withLock({ $0.stopped }) { return }
                events.emit(.connectivityChanged)
                await makePausedDue()
            }
        }
        let wakeUps = [watch] + StoreWakeUps.start(store: store, queue: name, signal: signal)
        state.withLock { state in
            if state.loop == nil && !state.stopped {
                state.loop = loop
                state.watch = wakeUps
            } else {
                loop.cancel()
                wakeUps.forEach { $0.cancel() }
            }
        }
    }

    func wake() {
        signal.wake()
    }

    /// Returns once no request is outstanding (dead letters aside), when the manager is closed,
    /// or when the calling task is cancelled.
    func waitUntilEmpty() async {
        // Subscribed before counting: an outcome between the two is not missed.
        let outcomes = settled.stream()
        var iterator = outcomes.makeAsyncIterator()
        while !Task.isCancelled {
            // The count first, then the outcomes under way: an outcome that emptied the store
            // counted itself as settling before its write.
            let count = (try? await store.count(queue: name)) ?? 0
            let settling = state.withLock { $0.settling }
            guard count > 0 || settling > 0 else { return }
            guard await iterator.next() != nil else { return }
        }
    }

    /// Stops taking requests and ends the event streams (each subscriber gets what was emitted
    /// before, then the end); attempts under way run to their end.
    func close() {
        state.withLock { $0.closed = true }
        shutdown()
    }

    /// Closes, then waits up to `gracePeriod` for the attempts under way to end (their outcomes
    /// written). Attempts still running then are left to end on their own; their requests stay
    /// stored, and the next manager on the store attempts them again if they never finish.
    func stop(gracePeriod: Duration) async {
        close()
        state.withLock { $0.drainDeadlinePassed = false }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let now = self.state.withLock { state -> Bool in
                        if state.running.isEmpty || state.drainDeadlinePassed { return true }
                        state.drainWaiters.append(continuation)
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: gracePeriod) }
            await group.next()
            // The deadline came first (or the attempts ended): the waiting child must end too
            // before the group returns — resumed now, or at once if it registers later.
            let left = state.withLock { state in
                state.drainDeadlinePassed = true
                defer { state.drainWaiters = [] }
                return state.drainWaiters
            }
            left.forEach { $0.resume() }
            group.cancelAll()
        }
    }

    func shutdown() {
        let tasks = state.withLock { state in
            state.stopped = true
            return [state.loop].compactMap { $0 } + state.watch
        }
        tasks.forEach { $0.cancel() }
        signal.stop()
        events.finish()
        settled.finish()
    }

    private var isStopped: Bool { state.withLock { $0.stopped } || Task.isCancelled }

    private func run() async {
        // Whether the last lease came back empty while a request was due (see ``IdleWake``).
        var emptyWithDue = false
        while !isStopped {
            let cap = settings.withLock { $0.cap }
            let free = cap - state.withLock { $0.running.count }
            if free <= 0 {
                await sleep(until: nil)
                continue
            }
            var leased: [OfflineEntry] = []
            do {
                if cap == 1 {
                    if let head = try await store.leaseHead(queue: name, now: now(), for: leaseDuration) { leased = [head] }
                } else {
                    leased = try await store.lease(queue: name, limit: free, cap: cap, now: now(), for: leaseDuration)
                }
            } catch {
                if isStopped { return }
                report("cannot lease requests: \(error)")
                await sleep(until: now().addingTimeInterval(settings.withLock { $0.submissionInterval }.seconds))
                continue
            }
            if leased.isEmpty {
                // Head of line (cap 1): the head's due date, not any entry's. A later entry due
                // now while the head waits out a pause would make the loop spin until then.
                let next =
                    state.withLock({ $0.running.isEmpty })
                    ? await reporting("find the next due request") { store, queue in
                        try await cap == 1 ? store.nextHeadDue(queue: queue) : store.nextDue(queue: queue)
                    } ?? nil
                    : nil
                let wake = IdleWake.decide(due: next, now: now(), emptyBefore: emptyWithDue, storeWakes: store.pollInterval != nil)
                guard case .sleep(let until) = wake else {
                    emptyWithDue = true
                    continue
                }
                emptyWithDue = next != nil && until != next
                await sleep(until: until)
                continue
            }
            emptyWithDue = false
            // The cap may have been lowered while the claim was under way (set right after
            // `register`, which starts processing): what is over the cap now goes back at once,
            // unattempted, so that one process's stale cap never breaks the fleet's.
            let room = settings.withLock { $0.cap } - state.withLock { $0.running.count }
            if leased.count > max(0, room) {
                let surplus = leased[max(0, room)...]
                leased = Array(leased.prefix(max(0, room)))
                await handBack(surplus)
            }
            for entry in leased { await begin(entry) }
        }
    }

    /// Releases the leases of entries claimed but not started: due again as they were, no
    /// attempt counted.
    private func handBack(_ entries: ArraySlice<OfflineEntry>) async {
        for entry in entries {
            guard let lease = entry.lease?.token else { continue }
            let record = OfflineEntry.AttemptRecord(date: now(), status: nil, error: "not attempted: over the cap")
            await leasedWrite("hand back an entry over the cap", entry.id) { store in
                try await store.reschedule(entry.id, lease: lease, notBefore: entry.notBefore, attempt: record, countsAttempt: false)
            }
        }
    }

    private func sleep(until date: Date?) async {
        await signal.sleep(until: date, time: time)
    }

    // MARK: - One attempt

    private func begin(_ entry: OfflineEntry) async {
        // A manager that was dropped (or shut down) starts nothing: its delegate could not be asked.
        // The lease lapses, or is voided when the store opens again.
        guard let lease = entry.lease?.token, !isStopped, owner.value != nil else { return }
        // Already running here (its lease lapsed and the loop leased it again): never a second
        // attempt; the running one adopts the new lease.
        let alreadyRunning = state.withLock { state -> Bool in
            guard state.running[entry.id] != nil else { return false }
            state.running[entry.id]?.lease = lease
            return true
        }
        if alreadyRunning { return }
        let request: any OfflineRequest
        switch decode(entry) {
        case .success(let decoded):
            request = decoded
        case .failure(.unregistered(let kind)):
            // Waits for its type: paused (not attempted, not counted) until `register` makes it due.
            let record = OfflineEntry.AttemptRecord(date: now(), status: nil, error: "not attempted: kind \(kind.debugDescription) is not registered")
            await leasedWrite("keep an entry of an unregistered kind", entry.id) { store in
                try await store.reschedule(
                    entry.id, lease: lease, notBefore: self.now().addingTimeInterval(Self.unregisteredPause.seconds),
                    attempt: record, countsAttempt: false
                )
            }
            // Registered meanwhile: due now after all.
            if isRegistered(kind) { await makePausedDue() }
            return
        case .failure(.damaged(let reason)):
            await leasedWrite("set an unreadable request aside", entry.id) { store in
                try await store.bury(entry.id, lease: lease, reason: reason, attempt: nil, countsAttempt: false)
            }
            finishOutstanding()
            events.emit(.failed(entry.id, error: reason))
            settled.emit(())
            return
        }
        let delegate = settings.withLock { $0.delegate.value }
        let manager = owner.value
        if let delegate, let manager, !delegate.offlineRequestManager(manager, shouldAttempt: request) {
            // Vetoed: stays queued, looked at again after the submission interval.
            let later = now().addingTimeInterval(settings.withLock { $0.submissionInterval }.seconds)
            let record = OfflineEntry.AttemptRecord(date: now(), status: nil, error: "not attempted (vetoed)")
            await leasedWrite("keep a vetoed request", entry.id) { store in
                try await store.reschedule(entry.id, lease: lease, notBefore: later, attempt: record, countsAttempt: false)
            }
            return
        }
        let limit = settings.withLock { $0.timeLimit }
        let generation = state.withLock { state -> Int in
            state.running[entry.id] = Running(deadline: session.clock.elapsed() + limit, generation: state.generation, lease: lease)
            return state.generation
        }
        events.emit(.started(entry.id, kind: type(of: request).kind))
        if let delegate, let manager { delegate.offlineRequestManager(manager, didStart: request) }
        updateProgress()
        Task { [self] in await perform(request, entry: entry, generation: generation) }
    }

    private func perform(_ request: any OfflineRequest, entry: OfflineEntry, generation: Int) async {
        let id = entry.id
        let context = OfflineRequestContext(
            id: id,
            session: session,
            onProgress: { [weak self] fraction in
                guard let self else { return }
                self.state.withLock { $0.running[id]?.progress = fraction }
                self.updateProgress()
            },
            onHeartbeat: { [weak self] in
                guard let self else { return }
                let limit = self.settings.withLock { $0.timeLimit }
                let deadline = self.session.clock.elapsed() + limit
                self.state.withLock { $0.running[id]?.deadline = deadline }
            }
        )
        // The lease is kept while the attempt runs, however long its heartbeats let it.
        let keeper = LeaseKeeper.keep(
            id,
            token: { [weak self] in self?.state.withLock { $0.running[id]?.lease } },
            store: store,
            duration: leaseDuration,
            report: { [weak self] (failure: String) in self?.report(failure) }
        )
        let outcome = await attempt(request, context: context, id: id)
        keeper.cancel()
        // An attempt abandoned by `clearAllRequests` changes nothing.
        guard state.withLock({ $0.generation == generation }) else { return }
        guard let lease = state.withLock({ $0.running[id]?.lease }) else { return }
        let delegate = settings.withLock { $0.delegate.value }
        let manager = owner.value
        let finishedAt = now()
        let heldBackUntil: Date? =
            if case .failure(let error) = outcome { session.heldBackDate(for: error, now: finishedAt) } else { nil }
        let decision = ManagerDecision.decide(
            outcome,
            now: finishedAt,
            heldBackUntil: heldBackUntil,
            submissionInterval: settings.withLock { $0.submissionInterval }
        ) { error in
            request.shouldAttemptResubmission(for: error)
                || (delegate.flatMap { delegate in
                    manager.map { delegate.offlineRequestManager($0, shouldReattempt: request, after: error) }
                } ?? false)
        }
        let record = { @Sendable (error: String) in OfflineEntry.AttemptRecord(date: self.now(), status: nil, error: error) }
        // Until its events are out, an outcome is not settled: `waitUntilEmpty` must not return
        // between the store's write and the event (a subscriber would miss it after `close()`).
        state.withLock { $0.settling += 1 }
        defer {
            let drained = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.settling -= 1
                guard state.running.isEmpty else { return [] }
                defer { state.drainWaiters = [] }
                return state.drainWaiters
            }
            drained.forEach { $0.resume() }
            settled.emit(())
        }
        switch decision {
        case .finished:
            await leasedWrite("remove a finished request", id) { store in try await store.complete(id, lease: lease) }
            state.withLock { state in
                state.running[id] = nil
                state.completed += 1
            }
            finishOutstanding()
            if let delegate, let manager { delegate.offlineRequestManager(manager, didFinish: request) }
            events.emit(.finished(id))
        case .keep(let later, let reason):
            await leasedWrite("keep a request for later", id) { store in
                try await store.reschedule(id, lease: lease, notBefore: later, attempt: record(reason), countsAttempt: false)
            }
            state.withLock { $0.running[id] = nil }
            updateProgress()
            events.emit(.kept(id, error: reason))
        case .again(let reason):
            await leasedWrite("attempt a request again", id) { store in
                try await store.reschedule(id, lease: lease, notBefore: self.now(), attempt: record(reason), countsAttempt: true)
            }
            state.withLock { $0.running[id] = nil }
            updateProgress()
        case .fail(let reason):
            await leasedWrite("set a failed request aside", id) { store in
                try await store.bury(id, lease: lease, reason: reason, attempt: record(reason), countsAttempt: true)
            }
            state.withLock { $0.running[id] = nil }
            finishOutstanding()
            if case .failure(let error) = outcome, let delegate, let manager {
                delegate.offlineRequestManager(manager, didFail: request, with: error)
            }
            events.emit(.failed(id, error: reason))
        }
        wake()
    }

    /// Performs the request under its time limit: the first of its end and the deadline wins.
    private func attempt(_ request: any OfflineRequest, context: OfflineRequestContext, id: OfflineEntry.ID) async
        -> Result<Void, any Error>
    {
        let decided = Lock(false)
        let handles = Lock<(work: Task<Void, Never>?, watchdog: Task<Void, Never>?)>((nil, nil))
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, any Error>, Never>) in
            let decide: @Sendable (Result<Void, any Error>) -> Void = { result in
                if decided.withLock({ flag in defer { flag = true }; return !flag }) { continuation.resume(returning: result) }
            }
            let work = Task {
                do {
                    try await request.perform(context)
                    decide(.success(()))
                } catch {
                    decide(.failure(error))
                }
            }
            let clock = session.clock
            let watchdog = Task { [weak self] in
                while let self, !Task.isCancelled {
                    guard let deadline = self.state.withLock({ $0.running[id]?.deadline }) else { return }
                    if clock.elapsed() >= deadline {
                        // Decided first: the cancelled work's own error must not win the race.
                        decide(.failure(OfflineRequestTimeout()))
                        work.cancel()
                        return
                    }
                    do { try await clock.sleepUntilElapsed(deadline) } catch { return }
                }
            }
            handles.withLock { $0 = (work, watchdog) }
            state.withLock { $0.running[id]?.work = work }
        }
        handles.withLock { $0.watchdog }?.cancel()
        return result
    }

    // MARK: - Progress

    /// One fewer outstanding request; at zero the batch ends (progress back to 1).
    private func finishOutstanding() {
        state.withLock { state in
            state.outstanding = max(0, state.outstanding - 1)
            if state.outstanding == 0 { state.completed = 0 }
        }
        updateProgress()
    }

    var currentProgress: Double { state.withLock { $0.progress } }

    private func updateProgress() {
        let (changed, value) = state.withLock { state -> (Bool, Double) in
            let value = ManagerDecision.progress(
                completed: state.completed,
                running: state.running.values.map(\.progress),
                outstanding: state.outstanding
            )
            defer { state.progress = value }
            return (value != state.progress, value)
        }
        guard changed else { return }
        events.emit(.progress(value))
        if let delegate = settings.withLock({ $0.delegate.value }), let manager = owner.value {
            delegate.offlineRequestManager(manager, didUpdateProgress: value)
        }
    }
}
