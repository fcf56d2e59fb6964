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
    /// The type of ``responseCache``, inferred from your declaration (`var responseCache:
    /// SQLiteResponseCache { … }`): any other spelling — `any ResponseCache`, an optional — does
    /// not compile, rather than being silently ignored. Default ``SessionResponseCache``.
    associatedtype ResponseCacheType: ResponseCache = SessionResponseCache
    /// Where responses are kept. Default the session's, ``Session/Configuration/responseCache`` (its
    /// replacement's, inside ``Session/withReplacement(_:keepingEndpointCaches:isolation:operation:)``).
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
        // The session's own cache unwrapped: no forwarding on the request path.
        let cache: any ResponseCache = (responseCache as? SessionResponseCache)?.cache ?? responseCache
        return ResponseCaching(policy: cachePolicy, cache: cache, storesAuthorizedResponses: cachesAuthorizedResponses)
    }
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
        try responseCache.removeCachedResponses(for: CacheKey(method: request.method.rawValue, url: request.urlString))
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
