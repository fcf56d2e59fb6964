import BrickRequest
import Foundation
import Logging
import Synchronization

/// The engine of an ``OfflineRequestManager``: the registered types, its ``DeliveryLoop`` with the
/// manager's policy (`ManagerCore+Delivery.swift`: head of line at cap 1, time limits), the
/// batch's counts and progress.
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

    /// An attempt of a request under way (its lease is the loop's).
    struct Running {
        var progress: Double = 0
        var deadline: Duration
        var generation: Int
    }

    struct State {
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
    }

    let name: String
    /// Where the manager logs: the caller's logger or the session's, with `brick.manager` set.
    let logger: Logger
    let store: any OfflineStore
    let session: Session
    let settings = Lock(Settings())
    let events = EventBroadcaster<OfflineRequestEvent>()
    /// Wakes ``waitUntilEmpty()`` after each outcome (its own stream: a subscription to ``events``
    /// would take the backlog kept for the user's first subscriber).
    let settled = EventBroadcaster<Void>()
    /// The public manager, for the delegate's calls (set right after it is made).
    let ownerBox = Lock(WeakManager(nil))
    var owner: WeakManager { ownerBox.withLock { $0 } }
    let state = Lock(State())
    let loop: DeliveryLoop
    /// How many times the loop went idle (``LoopSignal/idleCount``): a barrier for tests.
    var idleCount: Int { loop.idleCount }
    /// Whether the delivery loop takes entries now.
    var isTakingEntries: Bool { loop.isRunning }
    /// The loop's clock: the session's, so a `ManualClock` drives time limits and pauses in tests.
    let time: LoopTime
    var leaseDuration: Duration { settings.withLock { $0.leaseDuration } ?? store.leaseDuration }
    /// Keeps the leases of the attempts running here, all in one store call a round.
    let leaseKeeper: LeaseKeeper

    init(name: String, store: any OfflineStore, session: Session, logger: Logger?) {
        self.name = name
        var logger = logger ?? session.logger
        logger[metadataKey: "brick.manager"] = "\(name)"
        self.logger = logger
        self.store = store
        self.session = session
        self.time = LoopTime(clock: session.clock)
        self.loop = DeliveryLoop(session: session, time: time, headOfLineAtCapOne: true)
        self.leaseKeeper = LeaseKeeper(store: store, now: { [time] in time.now() })
    }

    func now() -> Date { time.now() }

    /// Runs a store call, turning its failure into a ``BrickError`` with code `storage`.
    func storeCall<T: Sendable>(_ call: @Sendable (any OfflineStore, String) async throws -> T) async throws(BrickError) -> T {
        try await BrickOfflineCore.storeCall(store, queue: name, caller: "offline request manager \(name)", call)
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
        start(clearingPauses: true)
    }

    func isRegistered(_ kind: String) -> Bool {
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
    enum Unreadable: Error {
        /// Its kind is not registered (yet): it waits, neither attempted nor set aside.
        case unregistered(kind: String)
        /// It can never be read: set aside with the reason.
        case damaged(reason: String)
    }

    func decode(_ entry: OfflineEntry) -> Result<any OfflineRequest, Unreadable> {
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
            if state.withLock({ $0.stopped }) || Task.isCancelled { return nil }
            report("cannot \(what): \(error)")
            return nil
        }
    }

    /// A write under a lease: `false` from the store means the lease was lost, which is reported.
    func leasedWrite(_ what: String, _ id: OfflineEntry.ID, _ call: @Sendable (any OfflineStore) async throws -> Bool) async {
        let held = await reporting(what) { store, _ in try await call(store) }
        if held == false { report("cannot \(what) \(id): its lease was lost (it was leased again meanwhile)") }
    }

    /// Makes every paused request due now (kept ones, vetoed ones, those waiting for their type)
    /// and wakes the loop: when an entry's type was registered while it was being put aside for
    /// want of it. (A reachability change or a registration asks the loop to do this before its
    /// next lease: ``DeliveryLoop/start(_:clearingPauses:)``.)
    func makePausedDue() async {
        await reporting("make the paused requests due") { store, queue in try await store.clearPauses(queue: queue, now: self.now()) }
        wake()
    }

    /// How long a stored request of a kind not registered yet is paused; `register` ends it at once.
    static let unregisteredPause: Duration = .seconds(3600)

    func report(_ failure: String) {
        logger.warning("offline store failed", metadata: ["error.message": "\(failure)"])
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
        state.withLock { state in
            state.generation += 1
            state.running = [:]
            state.completed = 0
            state.outstanding = 0
        }
        // Abandoned: told to stop, and whatever they end with is ignored.
        loop.abandonAll()
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
    func loadOutstanding() async {
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

    /// Starts processing (or wakes it); with `clearingPauses`, every paused request is made due
    /// before the next lease.
    func start(clearingPauses: Bool = false) {
        if !state.withLock({ $0.stopped }) { loop.start(self, clearingPauses: clearingPauses) }
    }

    func wake() {
        loop.wake()
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

    /// Stops taking requests, as ``DeliveryLoop/StateMachine`` documents (the attempts under way
    /// have `gracePeriod` to end, the rest are cancelled and handed back, due at once for the next
    /// manager on the store), then closes.
    func stop(gracePeriod: Duration) async {
        state.withLock { $0.closed = true }
        await loop.stop(gracePeriod: gracePeriod)
        shutdown()
    }

    func shutdown() {
        state.withLock { $0.stopped = true }
        loop.close(cancellingAttempts: false)
        events.finish()
        settled.finish()
    }

    // MARK: - Progress

    /// One fewer outstanding request; at zero the batch ends (progress back to 1).
    func finishOutstanding() {
        state.withLock { state in
            state.outstanding = max(0, state.outstanding - 1)
            if state.outstanding == 0 { state.completed = 0 }
        }
        updateProgress()
    }

    var currentProgress: Double { state.withLock { $0.progress } }

    func updateProgress() {
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
