import BrickRequest
import Foundation
import HTTPTypes
import Logging

/// A serial, durable queue of requests that must reach their server eventually: each is written
/// to disk before `add` returns, sent when the network allows, and retried until the server
/// answers with a 2xx. PersistentURLRequestQueue's model, on Linux, without its weaknesses.
///
/// ```swift
/// let queue = try PersistentRequestQueue(name: "sales", session: .shared, retryInterval: .seconds(30))
/// let id = try await queue.add(RecordSale(amount: 12))   // any brick endpoint; returns once on disk
/// await queue.waitUntilEmpty()
/// ```
///
/// **Order and retries.** One request at a time (or up to ``simultaneousRequestCap``), in the
/// order added (FIFO). On a store shared by several processes (`PostgresOfflineStore`) the cap
/// holds for all of them together: a cap of 1 is one request in flight in the whole fleet. A failed attempt
/// (any status other than 2xx, any transport failure) pauses its entry for `retryInterval` and
/// the queue moves on to the next; a delivery makes every paused entry due again at once (the
/// server is evidently back), and so does a change of reachability. Entries are retried forever
/// unless given ``EntryOptions/maxAttempts`` or ``EntryOptions/maxAge``; then they go to the
/// ``deadLetters()``. An attempt that could not leave the machine (no route, no DNS) does not
/// count.
///
/// **Guarantees.** An `add` that returned is on disk (synced: see `SQLiteOfflineStore`). After
/// the process is killed, every entry not yet delivered is sent again: at least once. A request
/// that was on its way when the process died may reach the server twice; every entry carries an
/// idempotency key made at `add`, the same on every attempt and after every restart, sent as
/// `Idempotency-Key` when the method is not idempotent, so a server that honours it applies it
/// once. No credential is ever written: `add` refuses a request that carries `Authorization`,
/// `Cookie` or `Proxy-Authorization` (or a header named in `sensitiveHeaders`); the queue's
/// `authenticator` signs each attempt when it is sent instead.
///
/// **Processing** starts with the first `add(_:options:)` or ``startProcessing()``
/// (not when the queue is opened: subscribe to ``events`` first to hear what happens
/// to the entries of an earlier run).
public final class PersistentRequestQueue: Sendable {
    /// Per-entry settings of `add(_:options:)`.
    public struct EntryOptions: Sendable, Hashable {
        /// The most attempts before the entry goes to the dead letters; `nil` (the default):
        /// retried until delivered.
        public var maxAttempts: Int?
        /// How long the entry may wait before it goes to the dead letters; `nil`: forever.
        public var maxAge: Duration?
        /// Not attempted before this date (a scheduled request); `nil`: at once.
        public var notBefore: Date?
        /// Entries with the same key are never pending together: see ``dedupe``.
        public var dedupeKey: String?
        /// What happens when a pending entry has the same ``dedupeKey``. Default
        /// ``DedupePolicy/replace``: the newer request replaces the pending one.
        public var dedupe: DedupePolicy

        /// Creates entry options.
        public init(
            maxAttempts: Int? = nil,
            maxAge: Duration? = nil,
            notBefore: Date? = nil,
            dedupeKey: String? = nil,
            dedupe: DedupePolicy = .replace
        ) {
            self.maxAttempts = maxAttempts
            self.maxAge = maxAge
            self.notBefore = notBefore
            self.dedupeKey = dedupeKey
            self.dedupe = dedupe
        }
    }

    /// The queue's name (and its store's file name).
    public let name: String
    /// Where the entries live.
    public let store: any OfflineStore
    /// The session whose transport sends the requests (and whose clock and reachability the
    /// queue follows).
    public let session: Session
    /// How long a failed entry waits before its next attempt.
    public let retryInterval: Duration
    /// Signs each attempt at send time, refreshing once on `401`; `nil` for none.
    public let authenticator: Authenticator?
    /// Signs each attempt as a Standard Webhooks message when it is sent (`webhook-id`: the
    /// entry's idempotency key, the same on every attempt; a fresh `webhook-timestamp`); `nil`
    /// for none. Its secrets are never stored.
    public let webhookSigner: WebhookSigner?
    /// The most entries attempted at once (default 1: one after another). On a store shared by
    /// several processes, the most attempted at once by all of them together.
    public var simultaneousRequestCap: Int { core.cap }

    private let core: QueueCore

    /// How many times the delivery loop went idle, with nothing due and no wake-up pending: a
    /// barrier for tests (read it, cause something, wait until it grows: the loop handled it).
    package var loopIdleCount: Int { core.idleCount }

    /// The default directory of offline stores: `$XDG_STATE_HOME/brickrequest`, else
    /// `~/.local/state/brickrequest`.
    public static var defaultDirectory: URL {
        if let state = ProcessInfo.processInfo.environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return URL(fileURLWithPath: state).appendingPathComponent("brickrequest")
        }
        return FileManager.default.homeDirectoryForCurrentUser
            .appendingPathComponent(".local/state/brickrequest")
    }

    /// Whether the delivery loop takes entries now (false before it starts, while a stop is under
    /// way, once stopped or closed): for tests, a barrier showing that a stop has begun.
    package var isTakingEntries: Bool { core.isTakingEntries }

    /// Tells the queue's first subscriber and its logger that its store file was damaged and
    /// moved aside (``OfflineQueueEvent/storeRecovered(movedAside:)``): for a store that recovers
    /// at open, as `SQLiteOfflineStore` does.
    package func reportRecoveredStore(movedAside moved: String) {
        core.emit(.storeRecovered(movedAside: moved))
        core.logger.warning(
            "offline store was damaged; moved aside and started afresh",
            metadata: ["brick.store.moved_to": "\(moved)"]
        )
    }

    /// Creates a queue on a store of your own (another ``OfflineStore``).
    ///
    /// - Parameters:
    ///   - name: The queue's name within the store.
    ///   - store: The store.
    ///   - session: Sends the requests.
    ///   - retryInterval: How long a failed entry waits.
    ///   - authenticator: Signs each attempt; `nil` for none.
    ///   - webhookSigner: Signs each attempt as a Standard Webhooks message; `nil` for none.
    ///   - sensitiveHeaders: More header names `add` refuses to store.
    ///   - simultaneousRequestCap: The most entries attempted at once, by every process sharing
    ///     the store together. Default 1 (strictly one after another, in order).
    ///   - logger: Where the queue logs what an operator needs (an entry set aside as a dead letter,
    ///     a store failure, a damaged store moved aside), with `brick.queue` set; give it the
    ///     worker's label and metadata. Default: the session's logger.
    public init(
        name: String,
        store: any OfflineStore,
        session: Session = .shared,
        retryInterval: Duration = .seconds(30),
        authenticator: Authenticator? = nil,
        webhookSigner: WebhookSigner? = nil,
        sensitiveHeaders: Set<String> = [],
        simultaneousRequestCap: Int = 1,
        logger: Logger? = nil
    ) {
        self.webhookSigner = webhookSigner
        self.name = name
        self.store = store
        self.session = session
        self.retryInterval = retryInterval
        self.authenticator = authenticator
        self.core = QueueCore(
            name: name,
            store: store,
            session: session,
            retryInterval: retryInterval,
            authenticator: authenticator,
            webhookSigner: webhookSigner,
            sensitiveHeaders: sensitiveHeaders,
            cap: simultaneousRequestCap,
            logger: logger
        )
    }

    deinit {
        core.shutdown()
    }

    // MARK: - Adding

    /// Renders `endpoint` now (as `resume()` would, with this queue's session) and stores the
    /// request; returns once it is on disk, and starts processing.
    ///
    /// - Parameters:
    ///   - endpoint: Any brick endpoint.
    ///   - options: Attempts, age, schedule and dedupe key of this entry.
    /// - Returns: The entry's identity.
    /// - Throws: `BrickError`: `BrickError.Code.invalidRequest` for a request that cannot be
    ///   rendered or stored (a credential header, a body over 16 MiB), `BrickError.Code.storage`
    ///   when the store cannot write it (disk full): it is then not stored.
    @discardableResult
    public func add(_ endpoint: some RequestType, options: EntryOptions = EntryOptions()) async throws(BrickError)
        -> OfflineEntry.ID
    {
        try await add(try renderForStorage(endpoint), options: options, completion: nil)
    }

    /// Adds a rendered request; see ``add(_:options:)``.
    @discardableResult
    public func add(_ request: TransportRequest, options: EntryOptions = EntryOptions()) async throws(BrickError)
        -> OfflineEntry.ID
    {
        try await add(request, options: options, completion: nil)
    }

    /// Adds `endpoint` as `add(_:options:)` does, and calls `completion` when this process
    /// delivers it (with the response) or sets it aside (with the reason). A completion lives in
    /// memory only: after a restart, outcomes arrive on ``events``.
    @discardableResult
    public func add(
        _ endpoint: some RequestType,
        options: EntryOptions = EntryOptions(),
        completion: @escaping @Sendable (Result<TransportResponse, BrickError>) -> Void
    ) async throws(BrickError) -> OfflineEntry.ID {
        try await add(try renderForStorage(endpoint), options: options, completion: completion)
    }

    /// Renders `endpoint` to be stored; one that signs its webhooks needs the queue's signer (its
    /// own cannot be stored).
    private func renderForStorage(_ endpoint: some RequestType) throws(BrickError) -> TransportRequest {
        if endpoint.requestWebhookSigner != nil, webhookSigner == nil {
            throw BrickError(
                .invalidRequest,
                message: "\(type(of: endpoint)) signs its webhooks, and its secret is never stored: "
                    + "make the queue with a webhookSigner, which signs each attempt when it is sent"
            )
        }
        let request = try session.renderForStorage(endpoint)
        return request
    }

    private func add(
        _ request: TransportRequest,
        options: EntryOptions,
        completion: (@Sendable (Result<TransportResponse, BrickError>) -> Void)?
    ) async throws(BrickError) -> OfflineEntry.ID {
        try await core.add(request, options: options, completion: completion)
    }

    /// The entry `add(_:options:)` would store for `endpoint` — rendered with this queue's
    /// session, checked (no credential header) and encoded — without storing it or starting
    /// processing: for writing many in one transaction with ``OfflineStore/add(_:dedupe:)`` (a
    /// bulk import, a tool that fills a queue that other processes drain).
    ///
    /// - Throws: `BrickError` with code `invalidRequest` when the request cannot be stored.
    public func draft(_ endpoint: some RequestType, options: EntryOptions) throws(BrickError) -> OfflineEntry.Draft {
        try core.draft(try renderForStorage(endpoint), options: options)
    }

    // MARK: - Processing

    /// Runs the queue now (after ``stopProcessing(gracePeriod:)``, or over entries an earlier run
    /// left): what is due is sent; an entry a failed attempt paused waits out the rest of its
    /// `retryInterval`. `add(_:options:)` starts processing too.
    public func startProcessing() {
        core.start(ignoringPauses: false)
    }

    /// Sends every entry that a failed attempt paused now, instead of at the end of its
    /// `retryInterval`, and starts processing: for a user's "Retry now", or an app coming back to
    /// the foreground once the network is back.
    ///
    /// Each paused entry spends an attempt at once (counted towards `maxAttempts`). Do not call it
    /// on a timer or after every add — against a host that is still down that burns attempts; the
    /// queue already retries paused entries at once by itself when a delivery succeeds (the server
    /// answers again) or the session's reachability changes.
    public func retryPausedEntriesNow() {
        core.start(ignoringPauses: true)
    }

    /// ``startProcessing()`` with `false`; ``retryPausedEntriesNow()`` with `true` — which spends an
    /// attempt of every paused entry at once (not for a timer, nor for after each add). The two
    /// names say which; this spelling is kept for code written against it.
    ///
    /// - Parameter ignoringPauseDates: Whether every paused entry is sent now.
    public func startProcessing(ignoringPauseDates: Bool) {
        core.start(ignoringPauses: ignoringPauseDates)
    }

    /// Stops taking entries, for a graceful shutdown: the attempts under way may finish for up to
    /// `gracePeriod`; those still running then are cancelled and handed back (their leases
    /// released, no attempt counted), so that another worker sharing the store takes them at once.
    /// Returns when no attempt runs here any more. ``startProcessing()`` or
    /// `add(_:options:)` starts processing again.
    public func stopProcessing(gracePeriod: Duration = .seconds(10)) async {
        await core.stopProcessing(gracePeriod: gracePeriod)
    }

    /// Stops processing and ends the queue's streams: the attempts under way finish (or are
    /// handed back after `gracePeriod`, as ``stopProcessing(gracePeriod:)`` does), then every
    /// ``events`` and ``counts`` stream ends — a `for await` loop over one gets every event emitted
    /// before, then leaves the loop. A closed queue refuses new entries
    /// (`BrickError.Code.invalidRequest`); what is stored stays for the next queue on the store.
    ///
    /// The end of a command-line tool:
    ///
    /// ```swift
    /// let events = queue.events                       // subscribed before anything is added
    /// let printer = Task { for await event in events { print(event) } }
    /// try await queue.add(RecordSale(amount: 12))
    /// await queue.waitUntilEmpty()
    /// await queue.close()                             // ends `events`: the loop finishes
    /// await printer.value                             // every event was printed
    /// ```
    ///
    /// - Parameter gracePeriod: How long attempts under way may still run. Default 10 s.
    public func close(gracePeriod: Duration = .seconds(10)) async {
        await core.close(gracePeriod: gracePeriod)
    }

    /// Returns once no entry is pending (dead letters aside), or when the calling task is cancelled:
    /// for command-line tools and tests. ``events`` emitted by then are in every subscriber's
    /// stream; ``close(gracePeriod:)`` ends those streams.
    /// Starts processing.
    public func waitUntilEmpty() async {
        core.start(ignoringPauses: false)
        await core.waitUntilEmpty()
    }

    // MARK: - Observing

    /// Pending entries, in flight included (dead letters not).
    public var count: Int {
        get async { await core.currentCount() }
    }

    /// The pending count now, then after every change.
    public var counts: AsyncStream<Int> { core.countStream() }

    /// What happens to entries (delivered, paused after a failed attempt, set aside), whoever
    /// added them: the outcomes of an earlier run's entries arrive here. Events before the first
    /// subscriber are kept for it (the last 1,000).
    public var events: AsyncStream<OfflineQueueEvent> { core.eventStream() }

    /// The pending entries, in order.
    public func entries() async throws(BrickError) -> [OfflineEntry] {
        try await core.storeCall { try await $0.list(queue: $1) }
    }

    /// When the oldest pending entry was added (one query; dead letters not counted), or `nil`
    /// when the queue is empty: how far behind delivery is.
    public func oldestEntryDate() async throws(BrickError) -> Date? {
        try await core.storeCall { try await $0.oldestEntryDate(queue: $1) }
    }

    // MARK: - Dead letters

    /// Entries set aside: out of attempts, expired, or unreadable; each with its last status,
    /// error and time.
    public func deadLetters() async throws(BrickError) -> [OfflineEntry] {
        try await core.storeCall { try await $0.deadLetters(queue: $1) }
    }

    /// Makes a dead letter pending again, at the end of the queue, with its attempts from zero.
    public func retryDeadLetter(_ id: OfflineEntry.ID) async throws(BrickError) {
        let now = core.now()
        try await core.storeCall { store, _ in try await store.retryDeadLetter(id, now: now) }
        core.start(ignoringPauses: false)
    }

    /// Removes a dead letter (or any entry) for good.
    public func removeDeadLetter(_ id: OfflineEntry.ID) async throws(BrickError) {
        try await core.storeCall { store, _ in try await store.remove(id) }
        await core.publishCount()
    }

    /// Removes every entry of this queue, dead letters included.
    public func removeAll() async throws(BrickError) {
        try await core.storeCall { try await $0.removeAll(queue: $1) }
        await core.publishCount()
    }
}

/// What happened to an entry of a ``PersistentRequestQueue``.
public enum OfflineQueueEvent: Sendable, Hashable {
    /// Delivered: the server answered with this 2xx status; the entry is gone.
    case delivered(OfflineEntry.ID, status: Int)
    /// An attempt failed; the entry waits until the date and the queue moved on.
    case paused(OfflineEntry.ID, until: Date, reason: String)
    /// Set aside as a dead letter (out of attempts, expired, unreadable): see
    /// `PersistentRequestQueue.deadLetters()`.
    case deadLettered(OfflineEntry.ID, reason: String)
    /// The store's file was damaged when the queue opened: it was moved aside (kept) and the
    /// queue started afresh.
    case storeRecovered(movedAside: String)
    /// The store could not be read or written; the queue tries again after its retry interval.
    case storeFailed(String)
}
