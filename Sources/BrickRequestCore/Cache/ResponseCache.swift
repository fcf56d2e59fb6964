import Synchronization

/// Where a ``CachedResponseType`` endpoint keeps responses: ``InMemoryResponseCache`` here,
/// `SQLiteResponseCache` (on disk, shared by processes) in `BrickOffline`.
///
/// A store keeps, per ``CacheKey``, one response per ``CachedResponse/variant``; it decides nothing
/// about HTTP (the session's cache rules do) and only bounds its size. Its methods are called from
/// any thread, synchronously, on the request's path: a store answers from memory or from a local
/// file, never the network. Errors are ``BrickError``s with ``BrickError/Code/storage``; a request
/// whose cache fails goes on as if it had missed (except under ``CachePolicy/cacheOnly``, where
/// the error is delivered).
public protocol ResponseCache: Sendable {
    /// The stored responses for `key`: one per variant, most recently stored first.
    ///
    /// - Parameter key: The request's key.
    /// - Returns: The stored responses; empty when there are none.
    func cachedResponses(for key: CacheKey) throws(BrickError) -> [CachedResponse]

    /// Stores `response`, replacing the one with the same key and variant.
    ///
    /// - Parameter response: The response to keep.
    func store(_ response: CachedResponse) throws(BrickError)

    /// Removes every stored response for `key`.
    ///
    /// - Parameter key: The key.
    func removeCachedResponses(for key: CacheKey) throws(BrickError)

    /// Removes every stored response.
    func removeAll() throws(BrickError)

    /// Waits until everything stored so far is durable (a store that writes behind, as
    /// `SQLiteResponseCache` does, writes it out); at shutdown (`ResponseCacheService` of
    /// `BrickLifecycle`), or before another process reads the files. Default: nothing to wait for.
    func flush() throws(BrickError)
}

extension ResponseCache {
    /// Nothing to wait for: a store that writes as it is called.
    public func flush() throws(BrickError) {}
}

/// A ``ResponseCache`` in memory, bounded in bytes, evicting the least recently used response
/// first. The default of every ``Session`` (32 MiB: ``Session/Configuration/responseCache``).
///
/// A response larger than a quarter of the bound is not stored, so that one download cannot empty
/// the cache.
public final class InMemoryResponseCache: ResponseCache {
    /// The most bytes the stored responses take (``CachedResponse/byteCount``).
    public let maxBytes: Int

    /// One stored response in the recency list.
    private final class Node {
        let response: CachedResponse
        let size: Int
        var newer: Node?
        weak var older: Node?
        init(_ response: CachedResponse) {
            self.response = response
            self.size = response.byteCount
        }
    }

    private struct State {
        var byKey: [CacheKey: [Node]] = [:]
        /// Most recently used.
        var newest: Node?
        /// Least recently used: evicted first.
        var oldest: Node?
        var bytes = 0
        var count = 0

        mutating func unlink(_ node: Node) {
            if let older = node.older { older.newer = node.newer } else { oldest = node.newer }
            if let newer = node.newer { newer.older = node.older } else { newest = node.older }
            node.newer = nil
            node.older = nil
        }

        mutating func pushNewest(_ node: Node) {
            node.older = newest
            node.newer = nil
            newest?.newer = node
            newest = node
            if oldest == nil { oldest = node }
        }

        mutating func remove(_ node: Node) {
            unlink(node)
            bytes -= node.size
            count -= 1
            let key = node.response.key
            byKey[key]?.removeAll { $0 === node }
            if byKey[key]?.isEmpty == true { byKey[key] = nil }
        }
    }

    // The nodes are reached only under this lock.
    private let state = Lock(State())

    /// Creates an empty cache.
    ///
    /// - Parameter maxBytes: The bound, in bytes. Default 32 MiB.
    public init(maxBytes: Int = 32 * 1024 * 1024) {
        self.maxBytes = max(0, maxBytes)
    }

    /// The bytes the stored responses take now.
    public var totalBytes: Int { state.withLock { $0.bytes } }
    /// How many responses are stored.
    public var count: Int { state.withLock { $0.count } }

    /// The stored responses for `key`, most recently stored first; each becomes the most recently
    /// used.
    public func cachedResponses(for key: CacheKey) -> [CachedResponse] {
        state.withLock { state in
            guard let nodes = state.byKey[key] else { return [] }
            for node in nodes.reversed() {
                state.unlink(node)
                state.pushNewest(node)
            }
            return nodes.map(\.response)
        }
    }

    /// Stores `response`, replacing the one with the same key and variant, and evicts the least
    /// recently used responses until the cache is within ``maxBytes``.
    public func store(_ response: CachedResponse) {
        state.withLock { state in
            let node = Node(response)
            if let existing = state.byKey[response.key]?.first(where: { $0.response.variant == response.variant }) {
                state.remove(existing)
            }
            guard node.size <= maxBytes / 4 else { return }
            state.byKey[response.key, default: []].insert(node, at: 0)
            state.pushNewest(node)
            state.bytes += node.size
            state.count += 1
            while state.bytes > maxBytes, let oldest = state.oldest {
                state.remove(oldest)
            }
        }
    }

    /// Removes every stored response for `key`.
    public func removeCachedResponses(for key: CacheKey) {
        state.withLock { state in
            for node in state.byKey[key] ?? [] { state.remove(node) }
        }
    }

    /// Removes every stored response.
    public func removeAll() {
        state.withLock { state in
            // Unlinked one by one: a long chain released at once would recurse through `newer`.
            while let oldest = state.oldest { state.remove(oldest) }
        }
    }
}
