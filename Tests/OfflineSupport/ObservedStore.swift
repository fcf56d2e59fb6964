import BrickOffline
import Foundation
import Synchronization

/// A store that forwards everything to another and tells the test each time a delivery loop read
/// that its queue is paused: the barrier that shows the loop looked and claimed nothing.
package final class ObservedStore: OfflineStore {
    package let inner: any OfflineStore
    /// Yields the queue's name each time ``isPaused(queue:)`` answers `true`.
    package let pausedReads: AsyncStream<String>
    private let reported: AsyncStream<String>.Continuation
    /// Yields the expiry each lease extension asks for.
    package let extensions: AsyncStream<Date>
    private let extended: AsyncStream<Date>.Continuation
    private let leaseLength: Duration?
    private let extensionsMade = Mutex(0)
    /// How many lease extensions were asked for so far.
    package var extensionCount: Int { extensionsMade.withLock { $0 } }
    /// Runs before each ``complete(_:lease:)`` goes to the inner store (a slow write).
    private let beforeComplete: (@Sendable (OfflineEntry.ID) async -> Void)?

    /// - Parameters:
    ///   - inner: The store everything goes to.
    ///   - leaseDuration: The lease length the store announces; `nil` for the inner store's.
    ///   - beforeComplete: Awaited before each `complete` is forwarded.
    package init(
        _ inner: any OfflineStore,
        leaseDuration: Duration? = nil,
        beforeComplete: (@Sendable (OfflineEntry.ID) async -> Void)? = nil
    ) {
        self.inner = inner
        self.leaseLength = leaseDuration
        self.beforeComplete = beforeComplete
        (pausedReads, reported) = AsyncStream.makeStream(of: String.self)
        (extensions, extended) = AsyncStream.makeStream(of: Date.self)
    }

    package func isPaused(queue: String) async throws -> Bool {
        let paused = try await inner.isPaused(queue: queue)
        if paused { reported.yield(queue) }
        return paused
    }

    package func add(_ drafts: [OfflineEntry.Draft], dedupe: DedupePolicy) async throws -> [OfflineEntry.ID] {
        try await inner.add(drafts, dedupe: dedupe)
    }
    package func lease(queue: String, limit: Int, cap: Int, now: Date, for duration: Duration) async throws -> [OfflineEntry] {
        try await inner.lease(queue: queue, limit: limit, cap: cap, now: now, for: duration)
    }
    package func leaseHead(queue: String, now: Date, for duration: Duration) async throws -> OfflineEntry? {
        try await inner.leaseHead(queue: queue, now: now, for: duration)
    }
    package func replacePending(queue: String, ids: [OfflineEntry.ID], with drafts: [OfflineEntry.Draft]) async throws -> Bool {
        try await inner.replacePending(queue: queue, ids: ids, with: drafts)
    }
    package func setAside(_ ids: [OfflineEntry.ID], reason: String, now: Date) async throws {
        try await inner.setAside(ids, reason: reason, now: now)
    }
    package func extend(_ id: OfflineEntry.ID, lease: UUID, until expiry: Date) async throws -> Bool {
        extended.yield(expiry)
        extensionsMade.withLock { $0 += 1 }
        return try await inner.extend(id, lease: lease, until: expiry)
    }
    package func extend(_ id: OfflineEntry.ID, lease: UUID, for duration: Duration, now: Date) async throws -> Bool {
        let (seconds, attoseconds) = duration.components
        extended.yield(now.addingTimeInterval(Double(seconds) + Double(attoseconds) * 1e-18))
        extensionsMade.withLock { $0 += 1 }
        return try await inner.extend(id, lease: lease, for: duration, now: now)
    }
    package func complete(_ id: OfflineEntry.ID, lease: UUID) async throws -> Bool {
        await beforeComplete?(id)
        return try await inner.complete(id, lease: lease)
    }
    package func reschedule(
        _ id: OfflineEntry.ID, lease: UUID, notBefore: Date, attempt: OfflineEntry.AttemptRecord, countsAttempt: Bool
    ) async throws -> Bool {
        try await inner.reschedule(id, lease: lease, notBefore: notBefore, attempt: attempt, countsAttempt: countsAttempt)
    }
    package func bury(
        _ id: OfflineEntry.ID, lease: UUID, reason: String, attempt: OfflineEntry.AttemptRecord?, countsAttempt: Bool
    ) async throws -> Bool {
        try await inner.bury(id, lease: lease, reason: reason, attempt: attempt, countsAttempt: countsAttempt)
    }
    package func clearPauses(queue: String, now: Date) async throws { try await inner.clearPauses(queue: queue, now: now) }
    package func nextDue(queue: String) async throws -> Date? { try await inner.nextDue(queue: queue) }
    package func nextHeadDue(queue: String) async throws -> Date? { try await inner.nextHeadDue(queue: queue) }
    package func count(queue: String) async throws -> Int { try await inner.count(queue: queue) }
    package func list(queue: String) async throws -> [OfflineEntry] { try await inner.list(queue: queue) }
    package func oldestEntryDate(queue: String) async throws -> Date? { try await inner.oldestEntryDate(queue: queue) }
    package func deadLetters(queue: String) async throws -> [OfflineEntry] { try await inner.deadLetters(queue: queue) }
    package func retryDeadLetter(_ id: OfflineEntry.ID, now: Date) async throws { try await inner.retryDeadLetter(id, now: now) }
    package func remove(_ id: OfflineEntry.ID) async throws { try await inner.remove(id) }
    package func removeAll(queue: String) async throws { try await inner.removeAll(queue: queue) }
    package var leaseDuration: Duration { leaseLength ?? inner.leaseDuration }
    package var pollInterval: Duration? { inner.pollInterval }
    package func wakeUps(queue: String) -> AsyncStream<Void>? { inner.wakeUps(queue: queue) }
}
