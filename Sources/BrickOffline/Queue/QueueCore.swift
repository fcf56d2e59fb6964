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

    private struct State {
        var loop: Task<Void, Never>?
        var reachabilityWatch: Task<Void, Never>?
        var ignorePauses = false
        var stopped = false
        var completions: [OfflineEntry.ID: Completion] = [:]
        var emptyWaiters: [CheckedContinuation<Void, Never>] = []
        var countSubscribers: [UUID: AsyncStream<Int>.Continuation] = [:]
    }

    let name: String
    let store: any OfflineStore
    let session: Session
    let retryInterval: Duration
    let authenticator: Authenticator?
    let sensitiveHeaders: Set<String>
    /// How long an attempt holds its entry before another worker may take it (extended while it runs).
    let leaseDuration: Duration = .seconds(300)
    /// The loop's clock: the session's, so a `ManualClock` drives pauses in tests.
    private let time: LoopTime
    private let state = Lock(State())
    private let signal = LoopSignal()
    private let events = EventBroadcaster<OfflineQueueEvent>()

    init(
        name: String,
        store: any OfflineStore,
        session: Session,
        retryInterval: Duration,
        authenticator: Authenticator?,
        sensitiveHeaders: Set<String>
    ) {
        self.name = name
        self.store = store
        self.session = session
        self.retryInterval = retryInterval
        self.authenticator = authenticator
        self.sensitiveHeaders = sensitiveHeaders
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

    func add(
        _ request: TransportRequest,
        options: PersistentRequestQueue.EntryOptions,
        completion: Completion?
    ) async throws(BrickError) -> OfflineEntry.ID {
        let stored = try StoredRequest(request, sensitiveHeaders: sensitiveHeaders)
        let payload = try stored.encoded()
        let now = self.now()
        let draft = OfflineEntry.Draft(
            queue: name,
            payload: payload,
            dedupeKey: options.dedupeKey,
            createdAt: now,
            notBefore: options.notBefore,
            maxAttempts: options.maxAttempts,
            expiresAt: options.maxAge.map { now.addingTimeInterval($0.seconds) }
        )
        let dedupe = options.dedupe
        let ids = try await storeCall { store, _ in try await store.add([draft], dedupe: dedupe) }
        let id = ids.first ?? draft.id
        if let completion { state.withLock { $0.completions[id] = completion } }
        if isWatched { await publishCount() }
        start(ignoringPauses: false)
        return id
    }

    // MARK: - The processing task

    func start(ignoringPauses: Bool) {
        let startLoop = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            if ignoringPauses { state.ignorePauses = true }
            return state.loop == nil
        }
        signal.wake()
        guard startLoop else { return }
        let loop = Task { [self] in await self.run() }
        let watch = Task { [self] in await self.watchReachability() }
        state.withLock { state in
            if state.loop == nil && !state.stopped {
                state.loop = loop
                state.reachabilityWatch = watch
            } else {
                loop.cancel()
                watch.cancel()
            }
        }
    }

    func shutdown() {
        let (tasks, waiters, counts) = state.withLock { state in
            state.stopped = true
            defer {
                state.emptyWaiters = []
                state.countSubscribers = [:]
            }
            return (
                [state.loop, state.reachabilityWatch].compactMap { $0 },
                state.emptyWaiters,
                Array(state.countSubscribers.values)
            )
        }
        tasks.forEach { $0.cancel() }
        signal.stop()
        waiters.forEach { $0.resume() }
        counts.forEach { $0.finish() }
        events.finish()
    }

    private var isStopped: Bool { state.withLock { $0.stopped } || Task.isCancelled }

    private func run() async {
        while !isStopped {
            if state.withLock({ state in defer { state.ignorePauses = false }; return state.ignorePauses }) {
                try? await store.clearPauses(queue: name, now: now())
            }
            let leased: [OfflineEntry]
            do {
                leased = try await store.lease(queue: name, limit: 1, now: now(), for: leaseDuration)
            } catch {
                if isStopped { return }
                report(storeFailure: error)
                await sleep(until: now().addingTimeInterval(retryInterval.seconds))
                continue
            }
            guard let entry = leased.first else {
                await publishCount()
                // Nothing due: wait for the earliest pause or schedule to end, or to be woken.
                await sleep(until: try? await store.nextDue(queue: name))
                continue
            }
            await attempt(entry)
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
        guard let lease = entry.lease?.token else { return }
        let started = now()
        if DeliveryDecision.isExpired(entry, now: started) {
            await apply(.deadLetter(reason: "expired before it could be delivered", countsAttempt: false), to: entry, lease: lease, attempt: nil, response: nil)
            return
        }
        let stored: StoredRequest
        do {
            stored = try StoredRequest.decoded(entry.payload)
        } catch {
            await apply(.deadLetter(reason: "the stored request cannot be read: \(error)", countsAttempt: false), to: entry, lease: lease, attempt: nil, response: nil)
            return
        }
        // Keep the lease while the request runs, so that it is never leased again under it.
        let keeper = LeaseKeeper.keep(
            entry.id,
            token: { lease },
            store: store,
            duration: leaseDuration,
            now: { [weak self] in self?.now() ?? Date() },
            report: { [weak self] (description: String) in self?.report(storeFailure: description) }
        )
        let (outcome, response) = await send(stored, idempotencyKey: entry.idempotencyKey)
        keeper.cancel()
        let finished = now()
        let record = OfflineEntry.AttemptRecord(
            date: finished,
            status: response.map { $0.status.code },
            error: {
                switch outcome {
                case .status(let code): return (200..<300).contains(code) ? nil : "status \(code)"
                case .transport(let kind): return "transport failure: \(kind)"
                case .unreadable(let why), .authentication(let why): return why
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
        await apply(decision, to: entry, lease: lease, attempt: record, response: response)
    }

    /// Sends the stored request once, signed; on a `401` with an authenticator, refreshes and
    /// sends once more.
    private func send(_ stored: StoredRequest, idempotencyKey: String) async -> (AttemptOutcome, TransportResponse?) {
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
                let response = capture.response(from: try await session.transport.send(request))
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
                return (.transport(error.kind), nil)
            }
        }
    }

    private func apply(
        _ decision: DeliveryDecision,
        to entry: OfflineEntry,
        lease: UUID,
        attempt: OfflineEntry.AttemptRecord?,
        response: TransportResponse?
    ) async {
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
                    metadata: ["queue": "\(name)", "entry": "\(entry.id)", "reason": "\(reason)"]
                )
                finish(entry.id, .failure(BrickError(.storage, message: "set aside as a dead letter: \(reason)")))
            }
        } catch {
            report(storeFailure: error)
        }
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
        session.logger.error("offline store failed", metadata: ["queue": "\(name)", "error": "\(description)"])
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
            let waiters = count == 0 ? state.emptyWaiters : []
            if count == 0 { state.emptyWaiters = [] }
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
            if await currentCount() == 0 { return }
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
