import BrickOfflineCore
import BrickRequest
import Dispatch
import Foundation
import GRDB
import Logging
import Synchronization

/// The cache's writer of its own: every write — a stored response and its body file (with the
/// uses of responses read since the last store), a removal — runs on one serial queue, never on the caller's thread. A request's path
/// (which may be a transport's thread: a `response(_:)` handler, a task going on at its safe point)
/// then does no disk write; a slow or full disk delays only the cache.
///
/// Until the writer has applied them, pending stores and removals are seen by every read of this
/// cache object (an overlay), so a response stored is found at once. Other processes see them once
/// written (``SQLiteResponseCache/flush()`` waits for that). The backlog is bounded
/// (``SQLiteResponseCache/maxPendingBytes``): a store that would exceed it is skipped (a cache may
/// always decline to store) and logged.
extension SQLiteResponseCache {
    /// Writes not applied yet, as reads must see them.
    struct PendingWrites {
        /// The sequence number of the last operation enqueued.
        var sequence: UInt64 = 0
        /// Stores not applied, per key and variant, with their sequence numbers.
        var stores: [CacheKey: [String: (sequence: UInt64, response: CachedResponse)]] = [:]
        /// Keys whose removal is not applied: their rows on disk are out of date.
        var removedKeys: [CacheKey: UInt64] = [:]
        /// A pending `removeAll`: every row on disk is out of date.
        var removedAll: UInt64?
        /// The bytes the pending stores hold.
        var bytes = 0
        /// The first write that failed since the last ``SQLiteResponseCache/flush()``.
        var failure: BrickError?
        /// Operations waiting for the writer, in order, and whether a drain is scheduled.
        var queue: [(sequence: UInt64, operation: WriteOperation)] = []
        var draining = false
    }

    enum WriteOperation: Sendable {
        case store(CachedResponse)
        case removeRows([Int64])
        case remove(CacheKey)
        case removeAll
    }

    /// What reads must see of the pending writes for `key`: the stores (most recent first), and
    /// whether the rows on disk for it are out of date.
    func pendingView(for key: CacheKey) -> (stores: [CachedResponse], hidesDisk: Bool) {
        pending.withLock { pending in
            let stores = (pending.stores[key] ?? [:]).values.sorted { $0.sequence > $1.sequence }.map(\.response)
            return (stores, pending.removedAll != nil || pending.removedKeys[key] != nil)
        }
    }

    /// How many writes were handed to the writer so far (a read hands it none: for tests).
    package var writesEnqueued: UInt64 { pending.withLock { $0.sequence } }

    /// Hands `operation` to the writer; returns `false` when a store is declined (the backlog is full).
    @discardableResult
    func enqueue(_ operation: WriteOperation) -> Bool {
        let accepted = pending.withLock { pending -> (schedulesDrain: Bool, declined: Bool) in
            switch operation {
            case .store(let response):
                let size = response.byteCount
                guard pending.bytes + size <= maxPendingBytes else { return (false, true) }
                pending.sequence += 1
                if let replaced = pending.stores[response.key]?[response.variant] { pending.bytes -= replaced.response.byteCount }
                pending.stores[response.key, default: [:]][response.variant] = (pending.sequence, response)
                pending.bytes += size
            case .remove(let key):
                pending.sequence += 1
                // Superseded: the writer still applies them in order, and the removal after them.
                for (_, entry) in pending.stores[key] ?? [:] { pending.bytes -= entry.response.byteCount }
                pending.stores[key] = nil
                pending.removedKeys[key] = pending.sequence
            case .removeAll:
                pending.sequence += 1
                pending.stores = [:]
                pending.bytes = 0
                pending.removedKeys = [:]
                pending.removedAll = pending.sequence
            case .removeRows:
                pending.sequence += 1
            }
            pending.queue.append((pending.sequence, operation))
            defer { pending.draining = true }
            return (!pending.draining, false)
        }
        if accepted.declined {
            if case .store(let response) = operation {
                logger.notice("a response was not stored: the cache's writer is behind", metadata: ["brick.cache.key": "\(response.key)"])
            }
            return false
        }
        if accepted.schedulesDrain { writer.async { [self] in drain() } }
        return true
    }

    /// On the writer: applies every operation waiting, in order; consecutive stores share one
    /// transaction and one commit.
    private func drain() {
        while true {
            let batch = pending.withLock { pending -> [(sequence: UInt64, operation: WriteOperation)] in
                defer { pending.queue.removeAll() }
                if pending.queue.isEmpty { pending.draining = false }
                return pending.queue
            }
            if batch.isEmpty { return }
            var stores: [(sequence: UInt64, response: CachedResponse)] = []
            for (sequence, operation) in batch {
                if case .store(let response) = operation {
                    stores.append((sequence, response))
                } else {
                    applyStores(stores)
                    stores = []
                    apply(operation, sequence: sequence)
                }
            }
            applyStores(stores)
        }
    }

    private func applyStores(_ stores: [(sequence: UInt64, response: CachedResponse)]) {
        guard !stores.isEmpty else { return }
        do throws(BrickError) {
            try write(stores.map(\.response))
        } catch {
            record(error)
        }
        for store in stores { settle(.store(store.response), sequence: store.sequence) }
    }

    private func record(_ error: BrickError) {
        logger.warning("the response cache could not write", metadata: ["error.message": "\(error)"])
        pending.withLock { if $0.failure == nil { $0.failure = error } }
    }

    /// On the writer's queue: one operation other than a store (stores go by ``applyStores(_:)``).
    private func apply(_ operation: WriteOperation, sequence: UInt64) {
        do throws(BrickError) {
            switch operation {
            case .store(let response): try write([response])
            case .removeRows(let ids):
                try remove(where: "id IN (\(ids.map { _ in "?" }.joined(separator: ",")))", StatementArguments(ids), doing: "remove damaged rows")
            case .remove(let key): try remove(where: "cacheKey = ?", [key.description], doing: "remove \(key)")
            case .removeAll: try remove(where: "1", [], doing: "remove everything")
            }
        } catch {
            record(error)
        }
        settle(operation, sequence: sequence)
    }

    /// After the writer applied `operation`: reads no longer need the overlay for it.
    private func settle(_ operation: WriteOperation, sequence: UInt64) {
        pending.withLock { pending in
            switch operation {
            case .store(let response):
                if let entry = pending.stores[response.key]?[response.variant], entry.sequence == sequence {
                    pending.stores[response.key]?[response.variant] = nil
                    if pending.stores[response.key]?.isEmpty == true { pending.stores[response.key] = nil }
                    pending.bytes -= entry.response.byteCount
                }
            case .remove(let key):
                if pending.removedKeys[key] == sequence { pending.removedKeys[key] = nil }
            case .removeAll:
                if pending.removedAll == sequence { pending.removedAll = nil }
            case .removeRows:
                break
            }
        }
    }

    /// Records when rows were last used, inside a write's transaction (recency is a hint: a row
    /// gone since is skipped).
    static func recordUses(_ uses: [Int64: Double], in db: Database) throws {
        guard !uses.isEmpty else { return }
        let statement = try db.cachedStatement(sql: "UPDATE response SET lastAccess = ? WHERE id = ? AND lastAccess < ?")
        for (id, at) in uses { try statement.execute(arguments: [at, id, at]) }
    }

    /// On the writer: records the uses noted since the last store (for ``flush()``).
    private func recordNotedUses() {
        let uses = recentUses.withLock { uses in
            defer { uses = [:] }
            return uses
        }
        guard !uses.isEmpty else { return }
        do {
            try pool.write { db in try Self.recordUses(uses, in: db) }
        } catch {
            record(Self.storageError(error, doing: "record recency"))
        }
    }

    /// Waits until every write handed to the writer so far is on disk (for another process, or
    /// before looking at the files), with the uses of responses read since the last store;
    /// throws the first write that failed since the last flush.
    ///
    /// - Throws: `BrickRequest.BrickError` (`BrickRequest.BrickError.Code.storage`).
    public func flush() throws(BrickError) {
        writer.sync { recordNotedUses() }
        if let failure = pending.withLock({ pending in defer { pending.failure = nil }; return pending.failure }) {
            throw failure
        }
    }
}
