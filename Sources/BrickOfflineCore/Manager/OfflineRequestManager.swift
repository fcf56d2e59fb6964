import BrickRequest
import Foundation
import Logging
import Synchronization

/// Keeps ``OfflineRequest``s on disk until they succeed or fail for a reason other than the
/// network, performs up to ``simultaneousRequestCap`` at a time, and reports progress
/// (OfflineRequestManager's model, on Linux).
///
/// ```swift
/// let manager = try OfflineRequestManager(name: "uploads", simultaneousRequestCap: 1)  // one after another, in order
/// manager.register(UploadPhoto.self)
/// try await manager.queueRequest(UploadPhoto(path: "/var/spool/photo-1.jpg"))   // returns once on disk
/// ```
///
/// Rules:
/// - **Order.** Requests start in the order queued. With a cap of 1 they run strictly one after
///   another: a request kept after a network failure holds back the ones behind it. With a larger
///   cap they overlap and finish in any order.
/// - **Failures.** A network-class error (no route, no name, cannot connect, timed out, connection lost) keeps the request: it is
///   attempted again after ``submissionInterval``, or at once when reachability changes. Any other
///   error is final — the request is set aside as a dead letter and `failed` is reported — unless
///   the request's ``OfflineRequest/shouldAttemptResubmission(for:)`` or the delegate's
///   `shouldReattempt` answers `true`: it is then attempted again at once.
/// - **Time limit.** An attempt that runs past ``requestTimeLimit`` (restarted by each
///   ``OfflineRequestContext/sendHeartbeat()``) is cancelled and fails for good with
///   ``OfflineRequestTimeout`` (code -1, "Offline Request Timed Out"); a late completion is ignored.
/// - **Progress.** (completed in this batch + the running requests' fractions) / (completed +
///   outstanding); 1 when nothing is outstanding, reset to 1 when the last one ends, before its
///   `finished` or `failed` is reported.
/// - **Restart.** Processing starts with the first ``register(_:)`` (or `queueRequest(_:)`, or
///   ``attemptSubmission()``): stored requests are read back with the registered types, with the
///   time each was first queued, and sent with no other call. One whose kind is not registered yet
///   waits — neither attempted nor set aside — until its type is registered; one whose data no
///   longer decodes is set aside with the reason, never dropped silently. (Brick endpoints queued
///   with ``queueRequest(_:)-(RequestType)`` need no registration: after a restart they go out with
///   the first of those calls.)
/// - **One attempt at a time per request.** The lease on a running request is extended while it
///   runs, however long its heartbeats keep it going, and a request this process is running is
///   never started again.
/// - **Crashes.** What was running when the process died is performed again (at least once).
public final class OfflineRequestManager: Sendable {
    /// The default manager's name: `offline_request_manager`.
    public static let defaultName = "offline_request_manager"

    /// The manager's name (and its store's file name).
    public let name: String
    /// Where the requests live.
    public let store: any OfflineStore
    /// The session handed to requests (its clock drives time limits and pauses).
    public let session: Session

    private let core: ManagerCore

    /// How many times the delivery loop went idle, with nothing due and no wake-up pending: a
    /// barrier for tests (read it, cause something, wait until it grows: the loop handled it).
    package var loopIdleCount: Int { core.idleCount }

    /// Whether the delivery loop takes requests now (false before it starts, while a stop is under
    /// way, once stopped or closed): for tests, a barrier showing that a stop has begun.
    package var isTakingRequests: Bool { core.isTakingEntries }

    /// Creates a manager on a store of your own.
    ///
    /// On a store shared by several processes (`PostgresOfflineStore`), give every process the
    /// same `simultaneousRequestCap`, here rather than by setting the property later: the cap
    /// holds for the fleet only when every claim is made with it.
    ///
    /// - Parameters:
    ///   - name: The queue's name in the store.
    ///   - store: The store.
    ///   - session: Handed to each request's ``OfflineRequestContext``. Default `.shared`.
    ///   - simultaneousRequestCap: The most requests performed at once (by the fleet, on a shared
    ///     store). Default 10.
    ///   - delegate: Decides and hears what happens; held weakly. Default none.
    ///   - logger: Where the manager logs what an operator needs (store failures), with
    ///     `brick.manager` set; give it the worker's label and metadata. Default: the session's logger.
    public init(
        name: String,
        store: any OfflineStore,
        session: Session = .shared,
        simultaneousRequestCap: Int = 10,
        delegate: (any OfflineRequestManagerDelegate)? = nil,
        logger: Logger? = nil
    ) {
        self.name = name
        self.store = store
        self.session = session
        self.core = ManagerCore(name: name, store: store, session: session, logger: logger)
        core.settings.withLock {
            $0.cap = max(1, simultaneousRequestCap)
            $0.delegate = WeakDelegate(delegate)
        }
        core.ownerBox.withLock { $0 = WeakManager(self) }
        core.register(BrickEndpointRequest.self, starting: false)
    }

    deinit {
        core.shutdown()
    }

    /// Registers a request type, so that stored requests of its ``OfflineRequest/kind`` can be read
    /// back, and starts processing: the stored requests of this kind (and every other registered
    /// one) go out without any other call. Pass the ``delegate`` and ``simultaneousRequestCap``
    /// to the initializer; a cap lowered after processing started still holds — what the loop
    /// had claimed over it is handed back unattempted.
    public func register<Request: OfflineRequest>(_ type: Request.Type) {
        core.register(type, starting: true)
    }

    /// The most requests performed at once; 1 = strictly serial, in order. Default 10.
    public var simultaneousRequestCap: Int {
        get { core.settings.withLock { $0.cap } }
        set { core.settings.withLock { $0.cap = max(1, newValue) }; core.wake() }
    }

    /// How long one attempt may run without a heartbeat. Default 120 s.
    public var requestTimeLimit: Duration {
        get { core.settings.withLock { $0.timeLimit } }
        set { core.settings.withLock { $0.timeLimit = newValue } }
    }

    /// How long a request kept after a network failure (or vetoed by the delegate) waits before
    /// it is attempted again. Default 10 s.
    public var submissionInterval: Duration {
        get { core.settings.withLock { $0.submissionInterval } }
        set { core.settings.withLock { $0.submissionInterval = newValue } }
    }

    /// How long a lease on a running request lasts before it lapses (extended every third of it
    /// while the request runs). For tests of lapsing leases.
    package var leaseDuration: Duration {
        get { core.leaseDuration }
        set { core.settings.withLock { $0.leaseDuration = newValue } }
    }

    /// Decides and hears what happens; held weakly.
    public var delegate: (any OfflineRequestManagerDelegate)? {
        get { core.settings.withLock { $0.delegate.value } }
        set { core.settings.withLock { $0.delegate = WeakDelegate(newValue) } }
    }

    /// The entry ``queueRequest(_:)-(OfflineRequest)`` would store for `request`, without storing
    /// it (for tests that fill a store as an earlier run would).
    package func draft(_ request: any OfflineRequest) throws(BrickError) -> OfflineEntry.Draft {
        try core.draft(request)
    }

    /// Queues a request; returns once it is on disk, and starts processing.
    ///
    /// - Throws: `BrickError.Code.storage` when it cannot be stored, `BrickError.Code.invalidRequest`
    ///   when it cannot be encoded.
    @discardableResult
    public func queueRequest<Request: OfflineRequest>(_ request: Request) async throws(BrickError) -> OfflineEntry.ID {
        try await core.queue(request)
    }

    /// Queues a brick endpoint, rendered now with this manager's session (credentials refused, as
    /// by ``PersistentRequestQueue``); performing it succeeds on a 2xx.
    @discardableResult
    public func queueRequest(_ endpoint: some RequestType) async throws(BrickError) -> OfflineEntry.ID {
        let stored = try StoredRequest(try session.renderForStorage(endpoint), sensitiveHeaders: [])
        return try await core.queue(BrickEndpointRequest(stored: stored, idempotencyKey: UUID().uuidString))
    }

    /// Starts processing now (it also starts with the first `queueRequest(_:)`): fills the free slots.
    public func attemptSubmission() {
        core.start()
    }

    /// Returns once no request is outstanding (dead letters aside), when the manager is closed, or
    /// when the calling task is cancelled: for command-line tools and tests. Events emitted by
    /// then are in every subscriber's ``events`` stream; ``close()`` ends those streams.
    public func waitUntilEmpty() async {
        core.wake()
        await core.waitUntilEmpty()
    }

    /// Stops taking requests and ends every ``events`` stream (a `for await` loop over one gets
    /// every event emitted before, then leaves the loop); attempts under way run to their end.
    /// A closed manager refuses new requests (`BrickError.Code.invalidRequest`); what is stored
    /// stays for the next manager on the store.
    ///
    /// ```swift
    /// let events = manager.events
    /// let printer = Task { for await event in events { print(event) } }
    /// try await manager.queueRequest(UploadPhoto(path: path))
    /// await manager.waitUntilEmpty()
    /// manager.close()
    /// await printer.value
    /// ```
    public func close() {
        core.close()
    }

    /// Shuts down gracefully, as ``PersistentRequestQueue/stopProcessing(gracePeriod:)`` stops a
    /// queue: no request is taken any more (new ones are refused); the attempts under way may end
    /// for up to `gracePeriod`, and their outcomes are stored and their events emitted; those still
    /// running then are cancelled (the `Task` running ``OfflineRequest/perform(_:)``) and handed
    /// back — lease released, no attempt counted — so that the next manager on the store takes
    /// them at once (delivery is at least once, never lost). Returns when no attempt runs, then
    /// ends the ``events`` streams as ``close()`` does. `BrickLifecycle`'s
    /// `OfflineRequestManagerService` calls this at a `ServiceGroup`'s graceful shutdown.
    ///
    /// - Parameter gracePeriod: How long attempts under way may take to end. Default 10 s.
    public func stop(gracePeriod: Duration = .seconds(10)) async {
        await core.stop(gracePeriod: gracePeriod)
    }

    /// The overall progress, 0 to 1 (1 when idle).
    public var progress: Double { core.currentProgress }

    /// What happens, as it happens. Events before the first subscriber are kept for it (the last 1,000).
    public var events: AsyncStream<OfflineRequestEvent> { core.events.stream() }

    /// Requests not yet finished (running ones included).
    public var totalRequestCount: Int {
        get async { (try? await store.count(queue: name)) ?? 0 }
    }

    /// The requests waiting (not running), in order, as their types read them back.
    public func pendingRequests() async throws(BrickError) -> [any OfflineRequest] {
        try await core.pending().map(\.request)
    }

    /// Lets you rewrite the waiting requests (merge several into one, batch them): `transform`
    /// gets them in order and returns their replacements, which take their place in the queue.
    /// Running requests are not included and stay ahead.
    public func modifyPendingRequests(
        _ transform: @Sendable ([any OfflineRequest]) -> [any OfflineRequest]
    ) async throws(BrickError) {
        try await core.modifyPending(transform)
    }

    /// Drops every request: running ones are cancelled and abandoned (whatever they end with is
    /// ignored); counts and progress start over.
    public func clearAllRequests() async throws(BrickError) {
        try await core.clearAll()
    }

    /// Sets aside (as dead letters) waiting requests first queued longer ago than `age`.
    /// Default 12 h.
    public func clearStaleRequests(olderThan age: Duration = .seconds(12 * 3600)) async throws(BrickError) {
        try await core.clearStale(olderThan: age)
    }

    /// Requests that failed for good, with their reasons.
    public func deadLetters() async throws(BrickError) -> [OfflineEntry] {
        try await core.storeCall { store, queue in try await store.deadLetters(queue: queue) }
    }
}

/// A brick endpoint queued with ``OfflineRequestManager/queueRequest(_:)-(RequestType)``: its
/// rendered request, sent through the context's session (its host's traffic policy, then its
/// transport); succeeds on a 2xx.
struct BrickEndpointRequest: OfflineRequest {
    static let kind = "brickrequest.endpoint"
    let stored: StoredRequest
    let idempotencyKey: String

    func perform(_ context: OfflineRequestContext) async throws {
        let request = try stored.transportRequest(idempotencyKey: idempotencyKey, credential: [:])
        let response: TransportResponse
        do {
            // A host paused by a 429 is not sent to: the refusal keeps the request until its date.
            response = try await context.session.sendThroughTrafficControl(request)
        } catch {
            throw BrickError.transport(error)
        }
        guard (200..<300).contains(response.status.code) else {
            throw BrickError(
                .unacceptableStatusCode,
                message: "status \(response.status.code)",
                status: response.status
            )
        }
    }
}

/// A weak reference to a delegate, so settings stay `Sendable`.
struct WeakDelegate: Sendable {
    private(set) weak var value: (any OfflineRequestManagerDelegate)?
    init(_ value: (any OfflineRequestManagerDelegate)?) { self.value = value }
}

/// A weak reference to the manager, for the delegate calls.
struct WeakManager: Sendable {
    private(set) weak var value: OfflineRequestManager?
    init(_ value: OfflineRequestManager?) { self.value = value }
}
