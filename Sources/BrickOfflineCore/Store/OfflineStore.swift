import BrickRequest
import FoundationEssentials

/// What `add` does when a pending entry with the same dedupe key exists.
public enum DedupePolicy: Sendable, Hashable {
    /// The new entry is refused (`OfflineStoreError.duplicate`): the pending one stands.
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
    /// Extends a lease that is still held to `duration` after `now`, a date on the caller's clock
    /// (the one it leases by: a queue's start date plus monotonic time, which a step of the wall
    /// clock does not move); returns `false` when the lease was lost. A store that judges leases by
    /// a clock of its own (PostgreSQL: the database's) takes only the length. Default:
    /// ``extend(_:lease:until:)`` at `now + duration`. What queues and managers call.
    func extend(_ id: OfflineEntry.ID, lease: UUID, for duration: Duration, now: Date) async throws -> Bool
    /// Extends every lease of `leases` (entry → its lease token) that is still held, as
    /// ``extend(_:lease:for:now:)`` does, in one statement where the store can: what a queue's or
    /// manager's lease keeper sends for all its running attempts at once. Returns the entries
    /// whose lease was lost. Default: ``extend(_:lease:for:now:)`` for each.
    func extend(leases: [OfflineEntry.ID: UUID], for duration: Duration, now: Date) async throws -> Set<OfflineEntry.ID>
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
    /// Whether an operator paused `queue` (`brick-queue pause`): the queue's workers claim nothing
    /// from it until it is resumed; attempts under way finish. Read before each lease. Default
    /// `false` (a store without pauses).
    func isPaused(queue: String) async throws -> Bool
}

extension OfflineStore {
    /// Leases up to `limit` due entries of `queue`, with no cap on how many are leased at once.
    public func lease(queue: String, limit: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        try await lease(queue: queue, limit: limit, cap: .max, now: now, for: duration)
    }

    /// ``extend(_:lease:until:)`` at `now + duration`: leases dated on the caller's clock.
    public func extend(_ id: OfflineEntry.ID, lease: UUID, for duration: Duration, now: Date) async throws -> Bool {
        try await extend(id, lease: lease, until: now.addingTimeInterval(duration.seconds))
    }

    /// ``extend(_:lease:for:now:)`` for each lease, one after the other.
    public func extend(leases: [OfflineEntry.ID: UUID], for duration: Duration, now: Date) async throws -> Set<OfflineEntry.ID> {
        var lost: Set<OfflineEntry.ID> = []
        for (id, lease) in leases where try await !extend(id, lease: lease, for: duration, now: now) {
            lost.insert(id)
        }
        return lost
    }

    /// 300 s: a store of one process hands leases back when it opens.
    public var leaseDuration: Duration { .seconds(300) }
    /// `nil`: only this process writes the store, and it tells its own loops of every change.
    public var pollInterval: Duration? { nil }
    /// `nil`: only this process writes the store.
    public func wakeUps(queue: String) -> AsyncStream<Void>? { nil }
    /// `false`: a store without pauses.
    public func isPaused(queue: String) async throws -> Bool { false }
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
