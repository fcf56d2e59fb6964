import BrickLifecycle
public import BrickOfflineCore
public import Logging
public import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// A queue on PostgreSQL as one `Service` of a `ServiceGroup`: it opens the store inside `run()` —
/// once the group runs the `PostgresClient` — builds the queue, delivers until graceful shutdown,
/// and stops as `OfflineQueueService` does (attempts under way finish for the grace period, the
/// rest is handed back to the other workers).
///
/// ```swift
/// let client = PostgresClient(configuration: try PostgresOfflineStore.clientConfiguration())
/// let webhooks = PostgresQueueService(client: client) { store in
///     PersistentRequestQueue(name: "webhooks", store: store, simultaneousRequestCap: 64)
/// }
/// let group = ServiceGroup(
///     services: [client, webhooks, app],      // the client first: the others use it
///     gracefulShutdownSignals: [.sigterm],
///     logger: logger
/// )
/// try await group.run()
///
/// // In `app` (another Service, a request handler): waits until the store is open.
/// let queue = try await webhooks.queue()
/// ```
///
/// One object to hand to the group and to the code that adds: no `Task { await client.run() }`
/// before the store opens, no second place to open it.
public final class PostgresQueueService: Service, Sendable {
    /// The store's settings and the function that makes the queue once the store is open.
    private let client: PostgresClient
    private let schema: String
    private let leaseDuration: Duration
    private let wakeUps: PostgresOfflineStore.WakeUps
    private let logger: Logger
    private let startupDeadline: Duration
    private let gracePeriod: Duration
    private let makeQueue: @Sendable (PostgresOfflineStore) -> PersistentRequestQueue
    private let state = Mutex(State.waiting([:]))

    private enum State {
        /// Not open yet: the callers of `queue()` waiting, by ticket.
        case waiting([Int: CheckedContinuation<PersistentRequestQueue, any Error>])
        case open(PersistentRequestQueue)
        /// Opening failed, or `run()` ended before it opened.
        case failed(any Error)
    }
    private let tickets = Atomic<Int>(0)

    /// Creates the service; nothing is opened until the group runs it.
    ///
    /// - Parameters:
    ///   - client: The `PostgresClient`, run by the same group (list it first).
    ///   - schema: Where the tables live. Default `brick_offline`.
    ///   - leaseDuration: How long a lease lasts. Default 10 s.
    ///   - wakeUps: `LISTEN`/`NOTIFY` with a fallback poll (default), or polling only.
    ///   - logger: Where the store logs.
    ///   - startupDeadline: How long opening the store may take. Default
    ///     ``PostgresOfflineStore/defaultStartupDeadline``.
    ///   - gracePeriod: How long attempts under way may finish at shutdown. Default 10 s.
    ///   - queue: Makes the queue on the opened store (its name, session, cap, retry interval…).
    public init(
        client: PostgresClient,
        schema: String = "brick_offline",
        leaseDuration: Duration = .seconds(10),
        wakeUps: PostgresOfflineStore.WakeUps = .notify(),
        logger: Logger = Logger(label: "BrickOfflinePostgres"),
        startupDeadline: Duration = PostgresOfflineStore.defaultStartupDeadline,
        gracePeriod: Duration = .seconds(10),
        queue: @escaping @Sendable (PostgresOfflineStore) -> PersistentRequestQueue
    ) {
        self.client = client
        self.schema = schema
        self.leaseDuration = leaseDuration
        self.wakeUps = wakeUps
        self.logger = logger
        self.startupDeadline = startupDeadline
        self.gracePeriod = gracePeriod
        self.makeQueue = queue
    }

    /// The queue, once `run()` has opened the store: waits until then.
    ///
    /// - Throws: The error that opening the store threw (``OfflineStoreError``: the database
    ///   unreachable, the schema not valid), `CancellationError` when the calling task is
    ///   cancelled first.
    public func queue() async throws -> PersistentRequestQueue {
        let ticket = tickets.wrappingAdd(1, ordering: .relaxed).oldValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let ready: Result<PersistentRequestQueue, any Error>? = state.withLock { state in
                    switch state {
                    case .open(let queue): return .success(queue)
                    case .failed(let error): return .failure(error)
                    case .waiting(var waiters):
                        if Task.isCancelled { return .failure(CancellationError()) }
                        waiters[ticket] = continuation
                        state = .waiting(waiters)
                        return nil
                    }
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<PersistentRequestQueue, any Error>? in
                guard case .waiting(var waiters) = state, let waiter = waiters.removeValue(forKey: ticket) else { return nil }
                state = .waiting(waiters)
                return waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// Opens the store, makes the queue, hands it to the callers of ``queue()`` and delivers until
    /// graceful shutdown (or cancellation: everything handed back at once).
    ///
    /// - Throws: What opening the store threw (after handing it to the waiting callers).
    public func run() async throws {
        let queue: PersistentRequestQueue
        do {
            let store = try await PostgresOfflineStore(
                client: client, schema: schema, leaseDuration: leaseDuration, wakeUps: wakeUps, logger: logger,
                startupDeadline: startupDeadline
            )
            queue = makeQueue(store)
        } catch {
            settle(.failure(error))
            throw error
        }
        settle(.success(queue))
        try await OfflineQueueService(queue, gracePeriod: gracePeriod).run()
    }

    private func settle(_ result: Result<PersistentRequestQueue, any Error>) {
        let waiters = state.withLock { state -> [CheckedContinuation<PersistentRequestQueue, any Error>] in
            guard case .waiting(let waiters) = state else { return [] }
            switch result {
            case .success(let queue): state = .open(queue)
            case .failure(let error): state = .failed(error)
            }
            return Array(waiters.values)
        }
        for waiter in waiters { waiter.resume(with: result) }
    }
}
