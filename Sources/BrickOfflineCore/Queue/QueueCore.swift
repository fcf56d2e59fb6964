import BrickRequest
import Synchronization
import Foundation
import HTTPTypes
import Logging

/// The engine of a ``PersistentRequestQueue``: adds, its ``DeliveryLoop`` (started on demand,
/// stopped with the queue) with the queue's policy (`QueueCore+Delivery.swift`), the counts and
/// the events. Owns no reference to the public queue, so dropping the queue stops the loop.
final class QueueCore: Sendable {
    typealias Completion = @Sendable (Result<TransportResponse, BrickError>) -> Void

    struct State {
        /// Shut down: every waiter and stream has ended.
        var stopped = false
        /// Outcomes whose store writes and events are under way.
        var settling = 0
        /// Closed by ``close(gracePeriod:)``: no more entries are taken.
        var closed = false
        var completions: [OfflineEntry.ID: Completion] = [:]
        var emptyWaiters: [CheckedContinuation<Void, Never>] = []
        var countSubscribers: [UUID: AsyncStream<Int>.Continuation] = [:]
        /// Pauses a delivery clears: whether this worker paused an entry since it last cleared
        /// them, and when that was (another worker's pauses are cleared at most a second late).
        var pausedSinceClear = true
        var lastPauseClear: ContinuousClock.Instant?
    }

    /// Whether a delivery now clears the queue's pauses (the server answers again): at once when
    /// this worker paused an entry since the last clear, otherwise at most once a second — a
    /// statement per delivery (one more commit each) bought nothing through a backlog.
    func claimPauseClear() -> Bool {
        let now = ContinuousClock.now
        return state.withLock { state in
            guard state.pausedSinceClear || state.lastPauseClear.map({ now - $0 >= .seconds(1) }) ?? true else {
                return false
            }
            state.pausedSinceClear = false
            state.lastPauseClear = now
            return true
        }
    }

    let name: String
    /// Where the queue logs: the caller's logger or the session's, with `brick.queue` set.
    let logger: Logger
    let store: any OfflineStore
    let session: Session
    let retryInterval: Duration
    let authenticator: Authenticator?
    /// Signs each attempt as a Standard Webhooks message (`webhook-id`: the entry's idempotency key).
    let webhookSigner: WebhookSigner?
    let sensitiveHeaders: Set<String>
    /// The most entries attempted at once, by every worker of the store together.
    let cap: Int
    /// How long an attempt holds its entry before another worker may take it (extended while it runs).
    var leaseDuration: Duration { store.leaseDuration }
    /// The loop's clock: the session's, so a `ManualClock` drives pauses in tests.
    let time: LoopTime
    let state = Lock(State())
    let loop: DeliveryLoop
    /// Keeps the leases of the attempts running here, all in one store call a round.
    let leaseKeeper: LeaseKeeper
    /// How many times the loop went idle (``LoopSignal/idleCount``): a barrier for tests.
    var idleCount: Int { loop.idleCount }
    /// Whether the delivery loop takes entries now.
    var isTakingEntries: Bool { loop.isRunning }
    private let events = EventBroadcaster<OfflineQueueEvent>()

    init(
        name: String,
        store: any OfflineStore,
        session: Session,
        retryInterval: Duration,
        authenticator: Authenticator?,
        webhookSigner: WebhookSigner? = nil,
        sensitiveHeaders: Set<String>,
        cap: Int,
        logger: Logger?
    ) {
        self.name = name
        var logger = logger ?? session.logger
        logger[metadataKey: "brick.queue"] = "\(name)"
        self.logger = logger
        self.store = store
        self.session = session
        self.retryInterval = retryInterval
        self.authenticator = authenticator
        self.webhookSigner = webhookSigner
        // The session's credential names too: what it never sends across origins is never stored.
        self.sensitiveHeaders = sensitiveHeaders.union(session.configuration.sensitiveHeaders)
        self.cap = max(1, cap)
        self.time = LoopTime(clock: session.clock)
        self.loop = DeliveryLoop(session: session, time: time)
        self.leaseKeeper = LeaseKeeper(store: store, now: { [time] in time.now() })
    }

    func now() -> Date { time.now() }

    // MARK: - Store calls

    /// Runs a store call, turning its failure into a ``BrickError`` with code `storage`.
    func storeCall<T: Sendable>(
        _ call: @Sendable (any OfflineStore, String) async throws -> T
    ) async throws(BrickError) -> T {
        try await BrickOfflineCore.storeCall(store, queue: name, caller: "offline queue \(name)", call)
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
        if loop.needsWake(forEntryDue: draft.notBefore) { start(ignoringPauses: false) }
        return id
    }

    // MARK: - The delivery loop

    func start(ignoringPauses: Bool) {
        if !state.withLock({ $0.stopped }) { loop.start(self, clearingPauses: ignoringPauses) }
    }

    func shutdown() {
        let (waiters, counts) = state.withLock { state in
            state.stopped = true
            defer {
                state.emptyWaiters = []
                state.countSubscribers = [:]
            }
            return (state.emptyWaiters, Array(state.countSubscribers.values))
        }
        loop.close(cancellingAttempts: true)
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

    /// Stops taking entries, as ``DeliveryLoop/StateMachine`` documents: the attempts under way
    /// have `gracePeriod` (real time) to end, the rest are cancelled and handed back. Returns once
    /// no attempt runs. `start` takes entries again.
    func stopProcessing(gracePeriod: Duration) async {
        await loop.stop(gracePeriod: gracePeriod)
        await publishCount()
    }

    // MARK: - Counts and events

    func currentCount() async -> Int {
        (try? await store.count(queue: name)) ?? 0
    }

    /// Whether anyone listens to the count (a subscriber, or a caller waiting for it to reach 0).
    var isWatched: Bool {
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
        while !state.withLock({ $0.stopped }) && !Task.isCancelled {
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
