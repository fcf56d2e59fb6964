/// Keeps responses in a ``ResponseCache`` and answers from it, by HTTP's rules or by an explicit
/// ``CachePolicy``: data to show when the network is gone.
///
/// ```swift
/// final class GetTimeline: Component, GETRequestType, APISessionRequestType, CachedResponseType,
///     DecodableResponseType
/// {
///     typealias Model = Timeline
///     var urlString: String { "https://api.example.com/timeline" }
///     var cachePolicy: CachePolicy { .networkElseCache }
/// }
///
/// let timeline = try await GetTimeline().response()
/// if timeline.source != .network, timeline.isStale { showOfflineBanner() }
/// ```
///
/// What a delivered response says: ``Response/source`` (``ResponseSource/network``,
/// ``ResponseSource/cache`` or ``ResponseSource/revalidated``), ``Response/isStale`` and
/// ``Response/age``. A response from the cache made no network I/O. Validation
/// (``ValidatedResponseType``) and serialization apply to it as to any response.
///
/// Only `GET` and `HEAD` are read from and stored in the cache. A request that carries its own
/// conditional or range fields (`If-None-Match`, `If-Modified-Since`, `Range`, …) bypasses the
/// cache: its answer is for the caller. A successful `POST`, `PUT`, `PATCH` or `DELETE` of a
/// cached endpoint removes what is stored for its URL (RFC 9111 §4.4).
public protocol CachedResponseType: ResponseType {
    /// How the cache is used. Default ``CachePolicy/http``.
    var cachePolicy: CachePolicy { get }
    /// The type of ``responseCache``, inferred from your declaration: a concrete cache
    /// (`var responseCache: SQLiteResponseCache { … }`), `any ResponseCache`, or an optional of
    /// either (`nil`: the session's cache) — each is used as written. A type that is not a
    /// ``ResponseCache`` fails every request of the endpoint with ``BrickError/Code/invalidRequest``
    /// naming it. Default ``SessionResponseCache``.
    ///
    /// Unconstrained on purpose: an associated type constrained to ``ResponseCache`` cannot be
    /// `any ResponseCache` (an existential does not conform to its protocol), so that spelling
    /// compiled and silently fell back to the session's cache.
    associatedtype ResponseCacheType: Sendable = SessionResponseCache
    var responseCache: ResponseCacheType { get }
    /// Whether responses to requests that carry credentials (`Authorization`, or an
    /// ``AuthenticatedRequestType``'s) are stored even when the response does not say `public`,
    /// `s-maxage` or `must-revalidate`. Default `false`: a cache shared by users of one process
    /// would otherwise hand one user's data to another.
    var cachesAuthorizedResponses: Bool { get }
}

extension CachedResponseType {
    /// ``CachePolicy/http``.
    public var cachePolicy: CachePolicy { .http }
    /// `false`.
    public var cachesAuthorizedResponses: Bool { false }
    /// From ``cachePolicy``, ``responseCache`` and ``cachesAuthorizedResponses``.
    public var responseCaching: ResponseCaching? {
        let cache: any ResponseCache
        var misdeclared: BrickError? = nil
        switch Self.resolve(responseCache) {
        case .cache(let declared):
            cache = declared
        case .sessionCache:
            cache = session.resolved.configuration.responseCache
        case .notACache(let type):
            cache = session.resolved.configuration.responseCache  // never used: the request fails
            misdeclared = BrickError(
                .invalidRequest,
                message: "\(Self.self).responseCache is a \(type), which is not a ResponseCache: declare a ResponseCache, any ResponseCache or an optional of one"
            )
        }
        var caching = ResponseCaching(policy: cachePolicy, cache: cache, storesAuthorizedResponses: cachesAuthorizedResponses)
        caching.misdeclared = misdeclared
        return caching
    }

    /// The cache that ``responseCache`` names, whatever its spelling.
    static func resolve(_ declared: ResponseCacheType) -> ResolvedCache {
        // The session's own cache unwrapped: no forwarding on the request path.
        if let session = declared as? SessionResponseCache { return .cache(session.cache) }
        if let cache = declared as? any ResponseCache { return .cache(cache) }
        // An optional's `nil` (`as?` unwraps a present one above).
        if case Optional<Any>.none = declared as Any { return .sessionCache }
        return .notACache(String(describing: ResponseCacheType.self))
    }

    /// The cache ``responseCache`` names, or the error that it names none.
    func resolvedResponseCache() throws(BrickError) -> any ResponseCache {
        switch Self.resolve(responseCache) {
        case .cache(let cache): return cache
        case .sessionCache: return session.resolved.configuration.responseCache
        case .notACache:
            throw responseCaching?.misdeclared ?? BrickError(.invalidRequest, message: "no response cache")
        }
    }
}

/// What a ``CachedResponseType/responseCache`` declaration resolves to.
enum ResolvedCache {
    /// This cache.
    case cache(any ResponseCache)
    /// An optional declared `nil`: the session's.
    case sessionCache
    /// A declared type that is not a cache (its name).
    case notACache(String)
}

extension CachedResponseType where ResponseCacheType == SessionResponseCache {
    /// The session's cache.
    public var responseCache: SessionResponseCache {
        SessionResponseCache(session.resolved.configuration.responseCache)
    }
}

/// The ``CachedResponseType/ResponseCacheType`` of an endpoint that names no cache: its session's
/// ``Session/Configuration/responseCache``, which it forwards to.
public struct SessionResponseCache: ResponseCache {
    /// The session's cache.
    public let cache: any ResponseCache

    /// Forwards to `cache`.
    ///
    /// - Parameter cache: The session's cache.
    public init(_ cache: any ResponseCache) {
        self.cache = cache
    }

    /// The session cache's entries for `key`.
    public func cachedResponses(for key: CacheKey) throws(BrickError) -> [CachedResponse] {
        try cache.cachedResponses(for: key)
    }

    /// Stores `response` in the session's cache.
    public func store(_ response: CachedResponse) throws(BrickError) {
        try cache.store(response)
    }

    /// Removes the session cache's entries for `key`.
    public func removeCachedResponses(for key: CacheKey) throws(BrickError) {
        try cache.removeCachedResponses(for: key)
    }

    /// Flushes the session's cache.
    public func flush() throws(BrickError) {
        try cache.flush()
    }

    /// Empties the session's cache.
    public func removeAll() throws(BrickError) {
        try cache.removeAll()
    }
}

extension CachedResponseType where Self: Component {
    /// Removes what ``responseCache`` stores for this request's method and URL (every variant):
    /// the next request goes to the server.
    ///
    /// - Throws: ``BrickError``: ``BrickError/Code/invalidRequest`` when the request cannot be
    ///   rendered, ``BrickError/Code/storage`` when the store fails.
    public func removeCachedResponses() throws(BrickError) {
        let request = try RequestRenderer.render(self, session: session)
        try resolvedResponseCache().removeCachedResponses(for: CacheKey(method: request.method.rawValue, url: request.urlString))
    }
}

/// How one request uses a response cache: what ``RequestType/responseCaching`` gives the session.
/// ``CachedResponseType`` supplies it.
public struct ResponseCaching: Sendable {
    /// The policy.
    public var policy: CachePolicy
    /// The store.
    public var cache: any ResponseCache
    /// Whether responses to requests with credentials are stored anyway.
    public var storesAuthorizedResponses: Bool
    /// Why the endpoint's declared cache is not one: every request of it fails with this.
    package var misdeclared: BrickError?

    /// Creates the settings.
    ///
    /// - Parameters:
    ///   - policy: The policy.
    ///   - cache: The store.
    ///   - storesAuthorizedResponses: Store responses to requests with credentials anyway.
    public init(policy: CachePolicy, cache: any ResponseCache, storesAuthorizedResponses: Bool = false) {
        self.policy = policy
        self.cache = cache
        self.storesAuthorizedResponses = storesAuthorizedResponses
    }
}
