@_exported import BrickOfflineCore
import BrickRequest
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// An ``OfflineStore`` in PostgreSQL, shared by every process of a fleet: a
/// `PersistentRequestQueue` or `OfflineRequestManager` on it in each worker delivers the queue
/// together with the others.
///
/// ```swift
/// let client = PostgresClient(configuration: try PostgresOfflineStore.clientConfiguration())  // PG* variables
/// Task { await client.run() }                                   // the client is yours to run
/// let store = try await PostgresOfflineStore(client: client)    // schema "brick_offline", migrated here
/// let queue = PersistentRequestQueue(name: "webhooks", store: store, session: .shared,
///                                    simultaneousRequestCap: 64)
/// queue.startProcessing()
/// ```
///
/// **Claims.** One statement leases up to a batch of due entries (`FOR UPDATE SKIP LOCKED`) and
/// stamps them with this worker's name, a fresh token and an expiry taken from the database's
/// clock (so workers' clocks need not agree); the HTTP call runs outside any transaction. A queue's
/// `simultaneousRequestCap` is enforced here, for the whole fleet: claims of a capped queue take
/// turns on a transaction-scoped advisory lock and count the live leases first.
///
/// **Fencing.** Completing, rescheduling, burying and extending name the lease's token
/// (`WHERE id = $1 AND lease_token = $2`): a worker whose lease lapsed and was taken over changes
/// nothing, and is told so (`false`).
///
/// **Heartbeats.** A queue or manager extends the lease of each running attempt every third of
/// ``leaseDuration`` (default 10 s): a healthy attempt is never taken from its worker however long
/// it runs, and a dead worker's entries are taken by another one within about two lease lengths.
///
/// **Wake-ups.** Every change that makes work (an add, a reschedule, a finished or handed-back
/// entry) is followed by a `NOTIFY`, sent after the change commits and coalesced (at most one in
/// flight per queue, so a burst of adds sends a handful, and concurrent adds never queue up behind
/// PostgreSQL's notification lock); an outbox add notifies inside the caller's transaction, on
/// commit. Idle workers `LISTEN` on one pooled
/// connection and poll now and then in case a notification was missed. ``WakeUps/pollOnly(every:)``
/// is for poolers that break `LISTEN` (PgBouncer in transaction mode): such a store neither listens
/// nor notifies, so give every worker of the fleet the same mode.
///
/// **The hot table stays small.** A delivered entry is deleted in the statement that completes it;
/// dead letters stay (few) but are not in the claim's index.
///
/// The database's password never appears in what the store logs, throws or describes.
public final class PostgresOfflineStore: OfflineStore, CustomStringConvertible {
    /// How idle workers learn that there is work.
    public enum WakeUps: Sendable, Hashable {
        /// `LISTEN` on one connection of the pool (it holds it while a queue runs), and poll every
        /// `fallbackPoll` in case a notification was lost (a dropped connection).
        case notify(fallbackPoll: Duration = .seconds(5))
        /// No `LISTEN`: look every `every` (for PgBouncer in transaction mode, which breaks it).
        case pollOnly(every: Duration = .milliseconds(500))
    }

    /// The user's client: it runs the pool; the store only borrows connections.
    public let client: PostgresClient
    /// The schema that holds the store's tables (created and migrated by the store).
    public let schema: String
    /// How long a lease lasts before another worker may take the entry (extended while it runs).
    public let leaseDuration: Duration
    /// How idle workers learn that there is work.
    public let wakeUpMode: WakeUps
    /// This worker's name, stamped on its leases (`lease_owner`): host name, process id and a
    /// random suffix, unless given.
    public let workerName: String
    /// The minute this worker last dropped delivery counts older than a day (at most once a minute).
    let prunedMinute = Atomic<Int64>(0)

    let logger: Logger
    let listener: NotificationListener
    let notifier: Notifier
    /// Warns when the fleet's workers claim a queue with different caps.
    let capWatch = CapWatch()
    /// The attempts' outcomes, written in batches (PostgresOfflineStore+Outcomes.swift).
    package let outcomes = GroupCommitter<Outcome, Bool>(
        maxBatch: PostgresOfflineStore.outcomeBatchLimit,
        window: PostgresOfflineStore.outcomeWindow
    )
    /// Adds of this store under way now: a lone one notifies inside its own transaction.
    let addsUnderWay = Atomic<Int>(0)

    /// The channel that `NOTIFY` and `LISTEN` use: one per schema, the queue's name as payload.
    var channel: String { "\(schema)_wake" }

    /// Whether this store's writes send `NOTIFY` (not in poll-only mode: nobody listens).
    var sendsNotifications: Bool {
        if case .notify = wakeUpMode { return true }
        return false
    }

    /// After a change that made work in `queue` committed: wakes this process's loops on this store
    /// at once, and the other workers by a notification (coalesced: see ``Notifier``; none in
    /// poll-only mode, nor when the change's own statement `notified` already).
    func madeWork(in queue: String, notified: Bool = false) {
        listener.wakeLocally(queue: queue)
        if sendsNotifications && !notified { notifier.notify(queue) }
    }

    /// Opens the store in `schema` of the database `client` connects to, creating and migrating
    /// its tables first (several workers may start at once: migrations take turns on an advisory
    /// lock).
    ///
    /// - Parameters:
    ///   - client: A `PostgresClient` that you run (`await client.run()`, or as a `Service`).
    ///     Its pool must allow at least two connections: with ``WakeUps/notify(fallbackPoll:)`` the
    ///     store keeps one for `LISTEN` while a queue runs.
    ///   - schema: Where the tables live: lower-case letters, digits and `_`, starting with a
    ///     letter or `_`, at most 58 characters. Default `brick_offline`.
    ///   - leaseDuration: How long a lease lasts (at least 1 s). Default 10 s: a dead worker's
    ///     entries come back within about 20 s.
    ///   - wakeUps: `LISTEN`/`NOTIFY` with a fallback poll (default), or polling only.
    ///   - workerName: Stamped on this worker's leases, for operators, and on its notifications;
    ///     must be unique in the fleet. Default host:pid:random.
    ///   - logger: Where the store logs (a lost listener connection, its return).
    ///   - startupDeadline: How long opening may take — reaching the database and migrating
    ///     its schema — before it fails with an error naming what to check (host, port, user,
    ///     password, TLS, a database that is down, a client that is not running). Default 10 s.
    /// - Throws: ``OfflineStoreError`` when the schema name is not valid or the database cannot
    ///   be reached or migrated within `startupDeadline`.
    public init(
        client: PostgresClient,
        schema: String = "brick_offline",
        leaseDuration: Duration = .seconds(10),
        wakeUps: WakeUps = .notify(),
        workerName: String? = nil,
        logger: Logger = Logger(label: "BrickOfflinePostgres"),
        startupDeadline: Duration = PostgresOfflineStore.defaultStartupDeadline
    ) async throws {
        guard Self.isValidSchemaName(schema) else {
            throw OfflineStoreError(
                .io,
                message: "the schema name \(schema.debugDescription) is not valid: use lower-case letters, digits and _, starting with a letter or _, at most 58 characters"
            )
        }
        guard leaseDuration >= .seconds(1) else {
            throw OfflineStoreError(.io, message: "a lease must last at least 1 s (heartbeats extend it every third)")
        }
        self.client = client
        self.schema = schema
        self.leaseDuration = leaseDuration
        self.wakeUpMode = wakeUps
        self.logger = logger
        let workerName = workerName ?? Self.defaultWorkerName()
        self.workerName = workerName
        self.listener = NotificationListener(client: client, channel: "\(schema)_wake", ownName: workerName, logger: logger)
        self.notifier = Notifier(client: client, channel: "\(schema)_wake", sender: workerName, logger: logger)
        let schemaName = schema
        try await CallDeadline.run(
            "open the offline store in schema \(schema)",
            limit: startupDeadline,
            explanation: Self.connectionAdvice
        ) {
            try await PostgresSchema.migrate(client: client, schema: schemaName, logger: logger)
        }
    }

    /// How long opening a store may take by default: 10 s.
    public static let defaultStartupDeadline: Duration = .seconds(10)

    /// What to check when the database cannot be reached.
    package static let connectionAdvice =
        "the PostgresClient could not make a connection (a wrong host, port, user, password or TLS setting, or the database is down; the client's backgroundLogger logs why each attempt failed), or it is not running (`await client.run()`)"

    /// `PostgresOfflineStore(schema: …, worker: …)`: never the connection's settings or password.
    public var description: String {
        "PostgresOfflineStore(schema: \(schema), worker: \(workerName), lease: \(leaseDuration))"
    }

    /// How often a queue on this store looks for work in case a wake-up was missed.
    public var pollInterval: Duration? {
        switch wakeUpMode {
        case .notify(let fallbackPoll): return fallbackPoll
        case .pollOnly(let every): return every
        }
    }

    /// Yields when another worker made work for `queue` (with ``WakeUps/notify(fallbackPoll:)``).
    public func wakeUps(queue: String) -> AsyncStream<Void>? {
        guard case .notify = wakeUpMode else { return nil }
        return listener.stream(queue: queue)
    }

    static func isValidSchemaName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, name.unicodeScalars.count <= 58 else { return false }
        guard first == "_" || ("a"..."z").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || ("a"..."z").contains($0) || ("0"..."9").contains($0) }
    }

    static func defaultWorkerName() -> String {
        let host = ProcessInfo.processInfo.hostName
        return "\(host):\(ProcessInfo.processInfo.processIdentifier):\(UUID().uuidString.prefix(8).lowercased())"
    }

    // MARK: - Errors

    /// Runs `body`, turning a database failure into an ``OfflineStoreError`` that names what was
    /// being done and what the server said — never the connection's settings.
    @discardableResult
    func run<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            return try await CallDeadline.run(what, body)
        } catch let error as OfflineStoreError {
            throw error
        } catch {
            throw Self.storeError(error, doing: what)
        }
    }

    package static func storeError(_ error: any Error, doing what: String) -> OfflineStoreError {
        guard let error = error as? PSQLError else {
            if error is CancellationError { return OfflineStoreError(.io, message: "cannot \(what): cancelled") }
            if String(describing: type(of: error)) == "ConnectionPoolError" {
                // The pool gave up making connections (about a minute of failures) or was shut down.
                return OfflineStoreError(.io, message: "cannot \(what): \(connectionAdvice)")
            }
            return OfflineStoreError(.io, message: "cannot \(what): \(type(of: error))")
        }
        let state = error.serverInfo?[.sqlState]
        let said = error.serverInfo?[.message].map { ": \($0)" } ?? ""
        switch state {
        case "23505"?:
            return OfflineStoreError(.duplicate, message: "cannot \(what): a pending entry has the same dedupe key (PostgreSQL error 23505)")
        case "53100"?:
            return OfflineStoreError(.diskFull, message: "cannot \(what): the database's disk is full\(said)")
        case let state?:
            return OfflineStoreError(.io, message: "cannot \(what): PostgreSQL error \(state)\(said)")
        case nil:
            // A connection-level failure: its code says which (connectionError, serverClosedConnection, …).
            return OfflineStoreError(.io, message: "cannot \(what): PostgreSQL \(error.code)")
        }
    }
}
