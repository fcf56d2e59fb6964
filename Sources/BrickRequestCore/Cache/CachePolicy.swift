/// How a ``CachedResponseType`` endpoint uses its ``ResponseCache``.
///
/// | policy | online | offline (no route, cannot connect, timeout, reset) |
/// |---|---|---|
/// | ``http`` | fresh stored response, else the server (revalidating what is stored) | stale response if its `stale-if-error` allows, else the failure |
/// | ``networkOnly`` | the server; its response is stored | the failure |
/// | ``cacheOnly`` | stored response, fresh or stale; a miss is ``BrickError/Code/notCached`` | the same |
/// | ``cacheElseNetwork`` | stored response, fresh or stale; a miss goes to the server | stored response, else the failure |
/// | ``networkElseCache`` | the server (revalidating what is stored) | the stored response, flagged stale |
/// | ``cacheThenNetwork`` | the stored response, then the server's: two deliveries | the stored response, then the failure |
///
/// Every policy stores what the server sends when HTTP allows it (RFC 9111 §3): never a
/// `no-store` response, a partial one, a body that went to a file or a stream, or — unless the
/// response says `public`, `s-maxage` or `must-revalidate`, or the endpoint opts in with
/// ``CachedResponseType/cachesAuthorizedResponses`` — a response to a request that carried
/// credentials.
public enum CachePolicy: Sendable, Hashable {
    /// HTTP's own rules for a private cache (RFC 9111, RFC 5861): freshness from `max-age`,
    /// `Expires` and `Date`, and `Age`, or a heuristic (a tenth of the time since `Last-Modified`,
    /// at most a day) where the response gives none and its status allows one; `no-cache` and
    /// `must-revalidate` obeyed; `s-maxage` ignored. A stale response is revalidated with
    /// `If-None-Match` / `If-Modified-Since`; a `304` refreshes its header fields and delivers its
    /// body (``ResponseSource/revalidated``). `stale-while-revalidate` delivers a stale response at
    /// once and revalidates it in the background; `stale-if-error` delivers it when the server
    /// cannot be reached or answers 500, 502, 503 or 504. The request's own `Cache-Control`
    /// (`no-cache`, `no-store`, `max-age`, `max-stale`, `min-fresh`, `only-if-cached`) is obeyed.
    case http
    /// Never reads the cache; stores what the server sends.
    case networkOnly
    /// Only the cache: a stored response, fresh or stale (``Response/isStale`` says which), with no
    /// network I/O; a miss fails with ``BrickError/Code/notCached``.
    case cacheOnly
    /// A stored response if there is one, fresh or stale; otherwise the server.
    case cacheElseNetwork
    /// The server (revalidating a stored response it has validators for); when the server cannot be
    /// reached (no route, cannot connect, timeout, connection reset), or answers 500, 502, 503 or
    /// 504 and the stored response's `stale-if-error` allows it, the stored response, flagged stale.
    /// Retries of the endpoint are skipped when a stored response can stand in: the fallback comes
    /// at once.
    case networkElseCache
    /// The stored response first (if any), then the server's: a `response(_:)` handler is called
    /// twice, in that order; async callers read both from `responses()` (`response()` and `value`
    /// give the last). A failure of the server is the second delivery.
    case cacheThenNetwork
}
