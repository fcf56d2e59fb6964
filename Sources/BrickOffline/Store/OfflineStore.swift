import BrickRequest
import FoundationEssentials

/// One stored request of an offline queue, as a store keeps it.
public struct OfflineEntry: Sendable, Hashable, Identifiable {
    /// The entry's identity, made when it is added; stable across restarts.
    public typealias ID = UUID

    /// The entry's identity.
    public let id: ID
    /// The queue it belongs to (a store may hold several).
    public let queue: String
    /// Its position in the queue: entries are delivered in this order (FIFO).
    public let sequence: Int64
    /// What the queue stores for it (an encoded request).
    public let payload: Data
    /// Sent as `Idempotency-Key` when the method is not idempotent: made at `add`, the same on
    /// every attempt and after every restart.
    public let idempotencyKey: String
    /// Two entries with the same dedupe key are never pending together (see ``DedupePolicy``).
    public let dedupeKey: String?
    /// When it was added.
    public let createdAt: Date
    /// It is not attempted before this date (a retry's pause, or a scheduled entry).
    public let notBefore: Date
    /// Attempts made so far (those that reached the network).
    public let attempts: Int
    /// The most attempts before the entry goes to the dead letters, or `nil` for no limit.
    public let maxAttempts: Int?
    /// After this date the entry goes to the dead letters instead of being attempted; `nil`: never.
    public let expiresAt: Date?
    /// The lease under which a worker is attempting it, if any.
    public let lease: Lease?
    /// What the last attempt got, if there was one.
    public let lastAttempt: AttemptRecord?
    /// Why it is a dead letter, when it is one.
    public let deadLetter: DeadLetter?

    /// Creates an entry as a store read it.
    public init(
        id: ID,
        queue: String,
        sequence: Int64,
        payload: Data,
        idempotencyKey: String,
        dedupeKey: String?,
        createdAt: Date,
        notBefore: Date,
        attempts: Int,
        maxAttempts: Int?,
        expiresAt: Date?,
        lease: Lease?,
        lastAttempt: AttemptRecord?,
        deadLetter: DeadLetter?
    ) {
        self.id = id
        self.queue = queue
        self.sequence = sequence
        self.payload = payload
        self.idempotencyKey = idempotencyKey
        self.dedupeKey = dedupeKey
        self.createdAt = createdAt
        self.notBefore = notBefore
        self.attempts = attempts
        self.maxAttempts = maxAttempts
        self.expiresAt = expiresAt
        self.lease = lease
        self.lastAttempt = lastAttempt
        self.deadLetter = deadLetter
    }

    /// The longest queue name, in UTF-8 bytes, that every store and every API accepts (a
    /// PostgreSQL notification carries the name, and a SQLite store's file is named after it).
    public static let maximumQueueNameBytes = 200

    /// Checks `name` against the one rule for queue names of every store: not empty, at most
    /// ``maximumQueueNameBytes`` UTF-8 bytes, no control character. Stores and queues call it
    /// before any I/O.
    ///
    /// - Throws: ``OfflineStoreError`` of kind ``OfflineStoreError/Kind/invalidName``.
    public static func checkQueueName(_ name: String) throws(OfflineStoreError) {
        let bytes = name.utf8.count
        if bytes == 0 {
            throw OfflineStoreError(.invalidName, message: "a queue name cannot be empty")
        }
        if bytes > maximumQueueNameBytes {
            throw OfflineStoreError(
                .invalidName,
                message: "queue name \(String(name.prefix(32)).debugDescription)… is \(bytes) bytes long; the most is \(maximumQueueNameBytes) bytes"
            )
        }
        if name.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw OfflineStoreError(.invalidName, message: "queue name \(name.debugDescription) holds a control character")
        }
    }

    /// An entry to add: what the caller decides; the store assigns the sequence.
    public struct Draft: Sendable, Hashable {
        /// The identity.
        public var id: ID
        /// The queue.
        public var queue: String
        /// The stored request.
        public var payload: Data
        /// The idempotency key.
        public var idempotencyKey: String
        /// The dedupe key, if any.
        public var dedupeKey: String?
        /// When it was added.
        public var createdAt: Date
        /// The first date it may be attempted.
        public var notBefore: Date
        /// The attempt limit.
        public var maxAttempts: Int?
        /// The expiry.
        public var expiresAt: Date?

        /// Creates a draft.
        public init(
            id: ID = UUID(),
            queue: String,
            payload: Data,
            idempotencyKey: String = UUID().uuidString,
            dedupeKey: String? = nil,
            createdAt: Date,
            notBefore: Date? = nil,
            maxAttempts: Int? = nil,
            expiresAt: Date? = nil
        ) {
            self.id = id
            self.queue = queue
            self.payload = payload
            self.idempotencyKey = idempotencyKey
            self.dedupeKey = dedupeKey
            self.createdAt = createdAt
            self.notBefore = notBefore ?? createdAt
            self.maxAttempts = maxAttempts
            self.expiresAt = expiresAt
        }
    }

    /// A worker's claim on an entry: only the holder of the token may complete, reschedule or
    /// bury it, and only until the claim expires (then another worker may lease it again).
    public struct Lease: Sendable, Hashable {
        /// The claim's token.
        public let token: UUID
        /// When the claim lapses.
        public let expiresAt: Date

        /// Creates a lease.
        public init(token: UUID, expiresAt: Date) {
            self.token = token
            self.expiresAt = expiresAt
        }
    }

    /// What one attempt got.
    public struct AttemptRecord: Sendable, Hashable {
        /// When it was made.
        public var date: Date
        /// The response status, if a response arrived.
        public var status: Int?
        /// Why it failed, if it did (never a header value or a body).
        public var error: String?

        /// Creates a record.
        public init(date: Date, status: Int?, error: String?) {
            self.date = date
            self.status = status
            self.error = error
        }
    }

    /// Why an entry was set aside instead of being delivered.
    public struct DeadLetter: Sendable, Hashable {
        /// When it was set aside.
        public var date: Date
        /// Why: out of attempts, expired, or a payload that cannot be read.
        public var reason: String

        /// Creates a dead-letter record.
        public init(date: Date, reason: String) {
            self.date = date
            self.reason = reason
        }
    }
}

/// What `add` does when a pending entry with the same dedupe key exists.
public enum DedupePolicy: Sendable, Hashable {
    /// The new entry is refused (``OfflineStoreError/duplicate``): the pending one stands.
    case reject
    /// The new entry takes the pending one's place (a newer "save profile" replaces the older
    /// one); an entry under a lease is not replaced and the new one is refused instead.
    case replace
}

/// The storage behind an offline queue. An entry is *pending* until it is delivered (removed) or
/// set aside as a dead letter; a worker *leases* the next due entries, attempts them outside any
/// transaction, and then completes, reschedules or buries each one with its lease token. Leases
/// expire, so a store shared by several processes (on several machines) hands an entry whose
/// worker died to another one; a store used by one process releases every lease when it opens.
///
/// Every method either does all it says, durably, or throws: a returned `add` is on disk.
public protocol OfflineStore: Sendable {
    /// Adds entries, in order, in one durable step; returns their identities (for `.replace`,
    /// the new ones). Throws ``OfflineStoreError``.
    func add(_ drafts: [OfflineEntry.Draft], dedupe: DedupePolicy) async throws -> [OfflineEntry.ID]
    /// Leases up to `limit` due entries of `queue` (not before their `notBefore`, not leased or
    /// with a lapsed lease, not dead letters), oldest sequence first, for `duration` — but never
    /// so many that more than `cap` entries of `queue` hold a live lease at once, whoever holds
    /// them: a store shared by several processes enforces the cap across all of them.
    func lease(queue: String, limit: Int, cap: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry]
    /// Leases the oldest pending entry of `queue` if it is due and not leased; nothing otherwise
    /// (strict FIFO: an entry waiting holds back the ones behind it).
    func leaseHead(queue: String, now: Date, for duration: Duration) async throws -> OfflineEntry?
    /// Replaces the pending, unleased entries `ids` of `queue` with `drafts`, in one step (merging
    /// or batching waiting requests); the new entries take the place of the first one replaced.
    /// Returns `false`, changing nothing, when one of them was leased or removed meanwhile.
    func replacePending(queue: String, ids: [OfflineEntry.ID], with drafts: [OfflineEntry.Draft]) async throws -> Bool
    /// Sets pending, unleased entries aside as dead letters (stale ones, say).
    func setAside(_ ids: [OfflineEntry.ID], reason: String, now: Date) async throws
    /// Extends a lease that is still held; returns `false` when it was lost.
    func extend(_ id: OfflineEntry.ID, lease: UUID, until expiry: Date) async throws -> Bool
    /// Removes a delivered entry; returns `false` when the lease was lost (another worker has it).
    @discardableResult
    func complete(_ id: OfflineEntry.ID, lease: UUID) async throws -> Bool
    /// Records an attempt and makes the entry due again at `notBefore`, releasing the lease;
    /// `countsAttempt` adds one to its attempts.
    @discardableResult
    func reschedule(
        _ id: OfflineEntry.ID,
        lease: UUID,
        notBefore: Date,
        attempt: OfflineEntry.AttemptRecord,
        countsAttempt: Bool
    ) async throws -> Bool
    /// Sets the entry aside as a dead letter, releasing the lease.
    @discardableResult
    func bury(
        _ id: OfflineEntry.ID,
        lease: UUID,
        reason: String,
        attempt: OfflineEntry.AttemptRecord?,
        countsAttempt: Bool
    ) async throws -> Bool
    /// Makes every paused entry of `queue` due now (not the scheduled ones: those added with a
    /// later `notBefore` keep it).
    func clearPauses(queue: String, now: Date) async throws
    /// The earliest `notBefore` of the pending, unleased entries of `queue`, if any.
    func nextDue(queue: String) async throws -> Date?
    /// When ``leaseHead(queue:now:for:)`` may next lease the head of `queue` (its oldest pending
    /// entry): the later of its `notBefore` and the expiry of a live lease that holds it back, or
    /// `nil` when `queue` is empty. What a head-of-line consumer (cap 1) sleeps until: the earliest
    /// due date of *any* entry (``nextDue(queue:)``) can lie in the past while the head waits.
    func nextHeadDue(queue: String) async throws -> Date?
    /// Pending entries of `queue` (leased ones included, dead letters not).
    func count(queue: String) async throws -> Int
    /// Pending entries of `queue`, in order.
    func list(queue: String) async throws -> [OfflineEntry]
    /// When the oldest pending entry of `queue` (leased ones included, dead letters not) was
    /// added, or `nil` when it has none.
    func oldestEntryDate(queue: String) async throws -> Date?
    /// The dead letters of `queue`, oldest first.
    func deadLetters(queue: String) async throws -> [OfflineEntry]
    /// Makes a dead letter pending again, at the end of the queue, with its attempts reset.
    func retryDeadLetter(_ id: OfflineEntry.ID, now: Date) async throws
    /// Removes an entry (pending or dead) whatever its state.
    func remove(_ id: OfflineEntry.ID) async throws
    /// Removes every entry of `queue`, dead letters included.
    func removeAll(queue: String) async throws

    /// How long a lease lasts: a queue or manager on this store extends its leases every third
    /// of it while their attempts run, so an entry comes back to the other workers about one to
    /// two lease lengths after its worker died. Default 300 s (a store of one process).
    var leaseDuration: Duration { get }
    /// How often a queue or manager on this store looks for work that other processes made, in
    /// case a wake-up was missed; `nil` (the default) for a store only this process writes.
    var pollInterval: Duration? { get }
    /// Yields whenever another process may have made work for `queue` (added an entry, made one
    /// due, finished or handed one back); `nil` (the default) for a store only this process
    /// writes. The stream ends when the caller stops iterating it.
    func wakeUps(queue: String) -> AsyncStream<Void>?
}

extension OfflineStore {
    /// Leases up to `limit` due entries of `queue`, with no cap on how many are leased at once.
    public func lease(queue: String, limit: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        try await lease(queue: queue, limit: limit, cap: .max, now: now, for: duration)
    }

    /// 300 s: a store of one process hands leases back when it opens.
    public var leaseDuration: Duration { .seconds(300) }
    /// `nil`: only this process writes the store, and it tells its own loops of every change.
    public var pollInterval: Duration? { nil }
    /// `nil`: only this process writes the store.
    public func wakeUps(queue: String) -> AsyncStream<Void>? { nil }
    /// Read from ``list(queue:)`` (a store that can ask its database for the head does).
    public func nextHeadDue(queue: String) async throws -> Date? {
        guard let head = try await list(queue: queue).first else { return nil }
        return max(head.notBefore, head.lease?.expiresAt ?? head.notBefore)
    }
    /// Read from ``list(queue:)`` (a store that can ask its database for the minimum does).
    public func oldestEntryDate(queue: String) async throws -> Date? {
        try await list(queue: queue).lazy.map(\.createdAt).min()
    }
}

/// A failure of an ``OfflineStore``.
public struct OfflineStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of failure.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The disk (or the file system's quota) is full: nothing was stored.
        public static let diskFull = Kind("diskFull")
        /// The store's file is not a database or is damaged.
        public static let corrupt = Kind("corrupt")
        /// A pending entry has the same dedupe key (``DedupePolicy/reject``).
        public static let duplicate = Kind("duplicate")
        /// The entry does not exist (any more).
        public static let notFound = Kind("notFound")
        /// Any other failure to read or write the store (permissions, I/O).
        public static let io = Kind("io")
        /// A queue or store name breaks the naming rule (see ``OfflineEntry/checkQueueName(_:)``):
        /// refused before any I/O.
        public static let invalidName = Kind("invalidName")

        /// The kind's name.
        public var description: String { name }
    }

    /// The class of failure.
    public let kind: Kind
    /// What happened, without payloads.
    public let message: String

    /// Creates an error.
    public init(_ kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }

    /// `OfflineStoreError.kind: message`.
    public var description: String { "OfflineStoreError.\(kind): \(message)" }
}
