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
        /// The worker that holds it, where the store records it (PostgreSQL: the store's
        /// `workerName`); `nil` otherwise.
        public let owner: String?

        /// Creates a lease.
        public init(token: UUID, expiresAt: Date, owner: String? = nil) {
            self.token = token
            self.expiresAt = expiresAt
            self.owner = owner
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
