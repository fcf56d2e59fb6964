// Over 450 lines: the queue's loop, stop and attempt in one type until the shared delivery loop (issue 41, part 1) takes the loop out.
import BrickRequest
import Synchronization
import Foundation
import HTTPTypes
import Logging

/// The engine of a ``PersistentRequestQueue``: one processing task (started on demand, stopped
/// with the queue), its wake-ups, and the subscribers. Owns no reference to the public queue, so
/// dropping the queue stops the task.
final class QueueCore: Sendable {
    typealias Completion = @Sendable (Result<TransportResponse, BrickError>) -> Void

    /// An attempt running in this process.
    private struct Running {
        /// The lease it holds now (a newer one is adopted if its entry is leased again here).
        var lease: UUID
        /// The task sending it, once started.
        var task: Task<Void, Never>?
        /// Set when a graceful stop hands the entry back: its outcome is not recorded.
        var handingBack = false
    }

    private struct State {
        /// The processing loop and its wake-up sources (reachability, the store's wake-ups and polls).
        var loopTasks: [Task<Void, Never>] = []
        var ignorePauses = false
        var stopped = false
        /// Outcomes whose store writes and events are under way.
        var settling = 0
        /// Closed by ``close(gracePeriod:)``: no more entries are taken.
        var closed = false
        var running: [OfflineEntry.ID: Running] = [:]
        /// Callers of `stopProcessing` waiting for the running attempts to end.
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        var completions: [OfflineEntry.ID: Completion] = [:]
        var emptyWaiters: [CheckedContinuation<Void, Never>] = []
        var countSubscribers: [UUID: AsyncStream<Int>.Continuation] = [:]
        /// While the loop sleeps with nothing due before this date (`.distantFuture`: nothing
        /// scheduled), the date; `nil` while it works. An entry added for later needs no wake-up.
        var plannedWake: Date?
    }

    let name: String
    let store: any OfflineStore
    let session: Session
    let retryInterval: Duration
    let authenticator: Authenticator?
    let sensitiveHeaders: Set<String>
    /// The most entries attempted at once, by every worker of the store together.
    let cap: Int
    /// How long an attempt holds its entry before another worker may take it (extended while it runs).
    var leaseDuration: Duration { store.leaseDuration }
    /// The loop's clock: the session's, so a `ManualClock` drives pauses in tests.
    private let time: LoopTime
    private let state = Lock(State())
    private let signal = LoopSignal()
    /// How many times the loop went idle (``LoopSignal/idleCount``): a barrier for tests.
    var idleCount: Int { signal.idleCount }
    private let events = EventBroadcaster<OfflineQueueEvent>()

    init(
        name: String,
        store: any OfflineStore,
        session: Session,
        retryInterval: Duration,
        authenticator: Authenticator?,
        sensitiveHeaders: Set<String>,
        cap: Int
    ) {
        self.name = name
        self.store = store
        self.session = session
        self.retryInterval = retryInterval
        self.authenticator = authenticator
        // The session's credential names too: what it never sends across origins is never stored.
        self.sensitiveHeaders = sensitiveHeaders.union(session.configuration.sensitiveHeaders)
        self.cap = max(1, cap)
        self.time = LoopTime(clock: session.clock)
    }

    func now() -> Date { time.now() }

    // MARK: - Store calls

    /// Runs a store call, turning its failure into a ``BrickError`` with code `storage`.
    func storeCall<T: Sendable>(
        _ call: @Sendable (any OfflineStore, String) async throws -> T
    ) async throws(BrickError) -> T {
        try await BrickOffline.storeCall(store, queue: name, caller: "offline queue \(name)", call)
    }

    // MARK: - Adding

    /// The entry that `add` stores for `request`: checked (no credential) and encoded.
    func draft(
        _ request: TransportRequest,
        options: PersistentRequestQueue.EntryOptions
    ) throws(BrickError) -> OfflineEntry.Draft {
        do {
            try OfflineEntry.checkQueueName(name)
        } catch {
            throw BrickError(.invalidRequest, message: "offline queue: \(error.message)", underlying: error)
        }
        let stored = try StoredRequest(request, sensitiveHeaders: sensitiveHeaders)
        let payload = try stored.encoded()
        let now = self.now()
        return OfflineEntry.Draft(
            queue: name,
            payload: payload,
            dedupeKey: options.dedupeKey,
            createdAt: now,
            notBefore: options.notBefore,
            maxAttempts: options.maxAttempts,
            expiresAt: options.maxAge.map { now.addingTimeInterval($0.seconds) }
        )
    }

    func add(
        _ request: TransportRequest,
        options: PersistentRequestQueue.EntryOptions,
        completion: Completion?
    ) async throws(BrickError) -> OfflineEntry.ID {
        if state.withLock({ $0.closed }) {
            throw BrickError(.invalidRequest, message: "offline queue \(name) is closed; open a new queue on its store to add entries")
        }
        let draft = try draft(request, options: options)
        let dedupe = options.dedupe
        let ids = try await storeCall { store, _ in try await store.add([draft], dedupe: dedupe) }
        let id = ids.first ?? draft.id
        if let completion { state.withLock { $0.completions[id] = completion } }
        if isWatched { await publishCount() }
        // The loop sleeps until an earlier date anyway (it then reads the store again): an entry
        // for later does not wake it — three store reads saved per add of a delayed entry.
        let notNeeded = state.withLock { state in state.plannedWake.map { draft.notBefore >= $0 } ?? false }
        if !notNeeded { start(ignoringPauses: false) }
        return id
    }

    // MARK: - The processing task

    func start(ignoringPauses: Bool) {
        let startLoop = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            if ignoringPauses { state.ignorePauses = true }
            return state.loopTasks.isEmpty
        }
        signal.wake()
        guard startLoop else { return }
        let tasks =
            [Task { [self] in await self.run() }, Task { [self] in await self.watchReachability() }]
            + StoreWakeUps.start(store: store, queue: name, signal: signal)
        state.withLock { state in
            if state.loopTasks.isEmpty && !state.stopped {
                state.loopTasks = tasks
            } else {
                tasks.forEach { $0.cancel() }
            }
        }
    }

    func shutdown() {
        let (tasks, waiters, counts) = state.withLock { state in
            state.stopped = true
            defer {
                state.emptyWaiters = []
                state.countSubscribers = [:]
                state.loopTasks = []
            }
            return (
                state.loopTasks + state.running.values.compactMap(\.task),
                state.emptyWaiters + state.idleWaiters,
                Array(state.countSubscribers.values)
            )
        }
        tasks.forEach { $0.cancel() }
        signal.stop()
        waiters.forEach { $0.resume() }
        counts.forEach { $0.finish() }
        events.finish()
    }

    /// Stops processing (as ``stopProcessing(gracePeriod:)``), then ends every `events` and `counts`
    /// stream (each subscriber gets what was emitted before, then the end) and refuses new entries.
    func close(gracePeriod: Duration) async {
        state.withLock { $0.closed = true }
        await stopProcessing(gracePeriod: gracePeriod)
        shutdown()
    }

    /// Stops taking entries; lets the running attempts finish for up to `gracePeriod` (real time),
    /// then cancels the rest and hands their entries back (lease released, no attempt counted).
    /// Returns once no attempt runs. `start` takes entries again.
    func stopProcessing(gracePeriod: Duration) async {
        let loopTasks = state.withLock { state in
            defer { state.loopTasks = [] }
            return state.loopTasks
        }
        loopTasks.forEach { $0.cancel() }
        signal.wake()
        let deadline = Task {
            try? await Task.sleep(for: gracePeriod)
            if Task.isCancelled { return }
            let late = self.state.withLock { state in
                state.running.keys.compactMap { id -> Task<Void, Never>? in
                    state.running[id]?.handingBack = true
                    return state.running[id]?.task
                }
            }
            late.forEach { $0.cancel() }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { state -> Bool in
                if state.running.isEmpty { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
        deadline.cancel()
        await publishCount()
    }

    private var isStopped: Bool { state.withLock { $0.stopped } || Task.isCancelled }

    private func run() async {
        // Whether the last lease came back empty while an entry was due (see ``IdleWake``).
        var emptyWithDue = false
        while !isStopped {
            if state.withLock({ state in defer { state.ignorePauses = false }; return state.ignorePauses }) {
                try? await store.clearPauses(queue: name, now: now())
            }
            let free = cap - state.withLock { $0.running.count }
            if free <= 0 {
                // Woken when an attempt ends.
                await sleep(until: nil)
                continue
            }
            let leased: [OfflineEntry]
            do {
                leased = try await store.lease(queue: name, limit: free, cap: cap, now: now(), for: leaseDuration)
            } catch {
                if isStopped { return }
                report(storeFailure: error)
                await sleep(until: now().addingTimeInterval(retryInterval.seconds))
                continue
            }
            if isStopped {
                // Stopped while leasing: hand the entries straight back.
                for entry in leased { await handBack(entry.id, lease: entry.lease?.token) }
                return
            }
            if leased.isEmpty {
                // With attempts running, each publishes the count once it has emitted its event: a
                // count published here could reach 0 between an attempt's removal and its event.
                if state.withLock({ $0.running.isEmpty }) { await publishCount() }
                // Nothing due: wait for the earliest pause or schedule to end, or to be woken. The
                // date is published before the sleep: an add that sees it and skips the wake-up
                // is due no earlier, and one that does not see it wakes the loop (kept if early).
                let due = try? await store.nextDue(queue: name)
                let wake = IdleWake.decide(due: due, now: now(), emptyBefore: emptyWithDue, storeWakes: store.pollInterval != nil)
                guard case .sleep(let until) = wake else {
                    emptyWithDue = true
                    continue
                }
                emptyWithDue = due != nil && until != due
                state.withLock { $0.plannedWake = until ?? .distantFuture }
                await sleep(until: until)
                state.withLock { $0.plannedWake = nil }
                continue
            }
            emptyWithDue = false
            for entry in leased { launch(entry) }
        }
    }

    /// Starts an attempt of a leased entry, unless this process is attempting it already (its
    /// lease lapsed and was renewed here): that attempt then adopts the new lease.
    private func launch(_ entry: OfflineEntry) {
        guard let lease = entry.lease?.token else { return }
        let isNew = state.withLock { state -> Bool in
            if state.running[entry.id] != nil {
                state.running[entry.id]?.lease = lease
                return false
            }
            state.running[entry.id] = Running(lease: lease)
            return true
        }
        guard isNew else { return }
        let task = Task { [self] in
            await attempt(entry)
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.running[entry.id] = nil
                guard state.running.isEmpty else { return [] }
                defer { state.idleWaiters = [] }
                return state.idleWaiters
            }
            signal.wake()
            waiters.forEach { $0.resume() }
        }
        state.withLock { state in
            if state.running[entry.id] != nil { state.running[entry.id]?.task = task }
        }
    }

    /// The lease the attempt of `id` holds now.
    private func currentLease(_ id: OfflineEntry.ID) -> UUID? {
        state.withLock { $0.running[id]?.lease }
    }

    /// Releases an entry's lease without recording an attempt, so that another worker takes it now.
    private func handBack(_ id: OfflineEntry.ID, lease: UUID?) async {
        guard let lease else { return }
        let now = self.now()
        do {
            let held = try await store.reschedule(
                id,
                lease: lease,
                notBefore: now,
                attempt: OfflineEntry.AttemptRecord(date: now, status: nil, error: "handed back when processing stopped"),
                countsAttempt: false
            )
            if !held { report(leaseLost: id) }
        } catch {
            report(storeFailure: error)
        }
    }

    /// Waits for a wake-up (an add, `startProcessing`, a reachability change) or until `date`.
    private func sleep(until date: Date?) async {
        await signal.sleep(until: date, time: time)
    }

    /// When reachability changes, paused entries are looked at at once, not at the end of their pause.
    private func watchReachability() async {
        for await _ in session.reachability.changes() {
            if isStopped { return }
            state.withLock { $0.ignorePauses = true }
            signal.wake()
        }
    }

    // MARK: - One attempt

    private func attempt(_ entry: OfflineEntry) async {
        guard entry.lease?.token != nil else { return }
        let started = now()
        if DeliveryDecision.isExpired(entry, now: started) {
            await apply(.deadLetter(reason: "expired before it could be delivered", countsAttempt: false), to: entry, attempt: nil, response: nil)
            return
        }
        let stored: StoredRequest
        do {
            stored = try StoredRequest.decoded(entry.payload)
        } catch {
            await apply(.deadLetter(reason: "the stored request cannot be read: \(error)", countsAttempt: false), to: entry, attempt: nil, response: nil)
            return
        }
        // Keep the lease while the request runs, so that it is never leased again under it.
        let keeper = LeaseKeeper.keep(
            entry.id,
            token: { [weak self] in self?.currentLease(entry.id) },
            store: store,
            duration: leaseDuration,
            report: { [weak self] (description: String) in self?.report(storeFailure: description) }
        )
        let (outcome, response) = await send(stored, idempotencyKey: entry.idempotencyKey, attemptsBefore: entry.attempts)
        keeper.cancel()
        if state.withLock({ $0.running[entry.id]?.handingBack ?? false }) {
            await handBack(entry.id, lease: currentLease(entry.id))
            return
        }
        let finished = now()
        let record = OfflineEntry.AttemptRecord(
            date: finished,
            status: response.map { $0.status.code },
            error: {
                switch outcome {
                case .status(let code): return (200..<300).contains(code) ? nil : "status \(code)"
                case .transport(let kind): return "transport failure: \(kind)"
                case .unreadable(let why), .authentication(let why), .heldBack(_, let why): return why
                }
            }()
        )
        let decision = DeliveryDecision.decide(
            outcome,
            attemptsBefore: entry.attempts,
            maxAttempts: entry.maxAttempts,
            expiresAt: entry.expiresAt,
            now: finished,
            retryInterval: retryInterval
        )
        await apply(decision, to: entry, attempt: record, response: response)
    }

    /// Sends the stored request once, signed; on a `401` with an authenticator, refreshes and
    /// sends once more.
    private func send(
        _ stored: StoredRequest,
        idempotencyKey: String,
        attemptsBefore: Int
    ) async -> (AttemptOutcome, TransportResponse?) {
        var replayed = false
        while true {
            var generation = 0
            var credential: [String: String] = [:]
            if let authenticator {
                do {
                    (credential, generation) = try await authenticator.credential()
                } catch {
                    return (.authentication("\(error)"), nil)
                }
            }
            var request: TransportRequest
            do {
                request = try stored.transportRequest(idempotencyKey: idempotencyKey, credential: credential)
            } catch {
                return (.unreadable("\(error)"), nil)
            }
            // The status decides the delivery; the body is kept only while it fits the limit, so a
            // 2xx with a body too large for it is still a delivery (never sent again).
            let capture = ResponseCapture(limit: request.options.maxResponseSize ?? ResponseCapture.defaultLimit)
            request.options.destination = .stream(capture.stream)
            // The capture enforces the endpoint's limit itself; the transport's would fail the attempt.
            request.options.maxResponseSize = nil
            do {
                // Through the session's traffic policy: a host paused by a 429 is not sent to.
                let response = capture.response(from: try await session.sendThroughTrafficControl(request, attemptsBefore: attemptsBefore))
                if response.status.code == 401, let authenticator, !replayed {
                    replayed = true
                    do {
                        try await authenticator.refresh(after: generation)
                    } catch {
                        return (.authentication("the credential could not be refreshed: \(error)"), response)
                    }
                    continue
                }
                return (.status(response.status.code), response)
            } catch {
                // Stopped by the capture once the body outgrew the limit: the status stands.
                if let response = capture.responseWithoutBody(after: error) {
                    return (.status(response.status.code), response)
                }
                if NetworkFailure.of(error.kind) == .heldBack {
                    return (.heldBack(until: session.heldBackDate(for: error, now: now()), reason: error.message), nil)
                }
                return (.transport(error.kind), nil)
            }
        }
    }

    private func apply(
        _ decision: DeliveryDecision,
        to entry: OfflineEntry,
        attempt: OfflineEntry.AttemptRecord?,
        response: TransportResponse?
    ) async {
        guard let lease = currentLease(entry.id) ?? entry.lease?.token else { return }
        // Until its event is out, an outcome is not settled: `waitUntilEmpty` must not return
        // between the store's write and the event (a subscriber would miss it after `close`).
        state.withLock { $0.settling += 1 }
        do {
            switch decision {
            case .delivered:
                if try await !store.complete(entry.id, lease: lease) { report(leaseLost: entry.id) }
                // The server answers again: every paused entry is due now, not at the end of its pause.
                try await store.clearPauses(queue: name, now: now())
                emit(.delivered(entry.id, status: response?.status.code ?? 200))
                if let response { finish(entry.id, .success(response)) }
            case .retry(let notBefore, let countsAttempt, let reason):
                let held = try await store.reschedule(
                    entry.id,
                    lease: lease,
                    notBefore: notBefore,
                    attempt: attempt ?? OfflineEntry.AttemptRecord(date: now(), status: nil, error: reason),
                    countsAttempt: countsAttempt
                )
                if !held { report(leaseLost: entry.id) }
                emit(.paused(entry.id, until: notBefore, reason: reason))
            case .deadLetter(let reason, let countsAttempt):
                if try await !store.bury(entry.id, lease: lease, reason: reason, attempt: attempt, countsAttempt: countsAttempt) {
                    report(leaseLost: entry.id)
                }
                emit(.deadLettered(entry.id, reason: reason))
                session.logger.warning(
                    "offline entry set aside",
                    metadata: ["brick.queue": "\(name)", "brick.entry.id": "\(entry.id)", "brick.reason": "\(reason)"]
                )
                finish(entry.id, .failure(BrickError(.storage, message: "set aside as a dead letter: \(reason)")))
            }
        } catch {
            report(storeFailure: error)
        }
        state.withLock { $0.settling -= 1 }
        await publishCount()
    }

    private func finish(_ id: OfflineEntry.ID, _ result: Result<TransportResponse, BrickError>) {
        let completion = state.withLock { $0.completions.removeValue(forKey: id) }
        completion?(result)
    }

    private func report(storeFailure error: any Error) {
        report(storeFailure: "\(error)")
    }

    private func report(storeFailure description: String) {
        session.logger.warning("offline store failed", metadata: ["brick.queue": "\(name)", "error.message": "\(description)"])
        emit(.storeFailed(description))
    }

    /// The store refused a write because this attempt's lease was no longer held (it lapsed and the
    /// entry was leased again): what this attempt learned is not recorded; the holder's attempt is.
    private func report(leaseLost id: OfflineEntry.ID) {
        report(storeFailure: "the lease of \(id) was lost before its attempt ended; its outcome was not recorded")
    }

    // MARK: - Counts and events

    func currentCount() async -> Int {
        (try? await store.count(queue: name)) ?? 0
    }

    /// Whether anyone listens to the count (a subscriber, or a caller waiting for it to reach 0).
    private var isWatched: Bool {
        state.withLock { !$0.countSubscribers.isEmpty || !$0.emptyWaiters.isEmpty }
    }

    /// Reads the count, when anyone listens, and tells the subscribers and, at zero, the waiters.
    func publishCount() async {
        guard isWatched, let count = try? await store.count(queue: name) else { return }
        let (subscribers, waiters) = state.withLock { state in
            // Empty only once no outcome is being written (read after the count: an outcome that
            // emptied the store counted itself as settling before its write).
            let empty = count == 0 && state.settling == 0
            let waiters = empty ? state.emptyWaiters : []
            if empty { state.emptyWaiters = [] }
            return (Array(state.countSubscribers.values), waiters)
        }
        subscribers.forEach { $0.yield(count) }
        waiters.forEach { $0.resume() }
    }

    func waitUntilEmpty() async {
        while !isStopped {
            // Registered first, then counted: a delivery between the two cannot be missed.
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let stopped = state.withLock { state -> Bool in
                        if state.stopped || Task.isCancelled { return true }
                        state.emptyWaiters.append(continuation)
                        return false
                    }
                    if stopped {
                        continuation.resume()
                    } else {
                        Task { await self.publishCount() }
                    }
                }
            } onCancel: {
                // A cancelled caller stops waiting; the other waiters look at the count again.
                let waiters = state.withLock { state in
                    defer { state.emptyWaiters = [] }
                    return state.emptyWaiters
                }
                waiters.forEach { $0.resume() }
            }
            if await currentCount() == 0 && state.withLock({ $0.settling == 0 }) { return }
        }
    }

    func countStream() -> AsyncStream<Int> {
        let (stream, continuation) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.countSubscribers.removeValue(forKey: id) }
        }
        let added = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.countSubscribers[id] = continuation
            return true
        }
        guard added else {
            continuation.finish()
            return stream
        }
        Task { [self] in continuation.yield(await currentCount()) }
        return stream
    }

    func eventStream() -> AsyncStream<OfflineQueueEvent> {
        events.stream()
    }

    func emit(_ event: OfflineQueueEvent) {
        events.emit(event)
    }
}
