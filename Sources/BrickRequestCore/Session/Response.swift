import FoundationEssentials

/// Where a response came from.
public enum ResponseSource: Sendable, Hashable {
    /// From the network.
    case network
    /// From the response cache, without contacting the server.
    case cache
    /// From the cache after the server confirmed it (`304 Not Modified`).
    case revalidated
}

/// The outcome of a request: the typed result and everything known about the exchange.
public struct Response<Success: Sendable, Failure: Error>: Sendable {
    /// The rendered request, or `nil` when rendering failed.
    public let request: TransportRequest?
    /// The serialized value or the error.
    public let result: Result<Success, Failure>
    /// The transport's response, when one arrived.
    public let transportResponse: TransportResponse?
    /// Retries made before this outcome.
    public let retryCount: Int
    /// Where the response came from.
    public let source: ResponseSource
    /// Whether the response is stale: a stored response past its freshness lifetime, or one
    /// delivered in place of a failure (``CachePolicy/networkElseCache``, `stale-if-error`).
    /// `false` for a response from the network.
    public let isStale: Bool
    /// How old a response from the cache is (RFC 9111 §4.2.3: its age when it was stored plus the
    /// time since); `nil` for a response from the network.
    public let age: Duration?
    /// The date the server named in its `Retry-After` when the call ended without waiting for
    /// it: longer than the call waits in memory (its host's ``HostPolicy/whenLimited`` wait, 30 s
    /// by default), past the request's own `timeout` or its ``AutoRetryConfiguration/maxTotalDuration``,
    /// or with no retries left. Send it again then, or hand it to a `PersistentRequestQueue` with
    /// `notBefore`; `nil` otherwise.
    public let notBefore: Date?

    /// Creates a response.
    ///
    /// - Parameters:
    ///   - request: The rendered request.
    ///   - result: The outcome.
    ///   - transportResponse: The transport's response, if any.
    ///   - retryCount: Retries made.
    ///   - source: Where it came from.
    ///   - isStale: Whether it is stale.
    ///   - age: Its age, for a response from the cache.
    ///   - notBefore: The date of a `Retry-After` the call did not wait for.
    public init(
        request: TransportRequest?,
        result: Result<Success, Failure>,
        transportResponse: TransportResponse?,
        retryCount: Int = 0,
        source: ResponseSource = .network,
        isStale: Bool = false,
        age: Duration? = nil,
        notBefore: Date? = nil
    ) {
        self.notBefore = notBefore
        self.isStale = isStale
        self.age = age
        self.request = request
        self.result = result
        self.transportResponse = transportResponse
        self.retryCount = retryCount
        self.source = source
    }

    /// The status, when a response arrived.
    public var status: HTTPResponse.Status? { transportResponse?.status }
    /// The response's header fields (parsed on access).
    public var headers: HTTPFields { transportResponse?.headerFields ?? [:] }
    /// The raw body, when a response arrived in memory.
    public var data: Data? { transportResponse?.body }
    /// Transfer metrics, when a response arrived.
    public var metrics: TransportMetrics? { transportResponse?.metrics }
    /// The value, on success.
    public var value: Success? { try? result.get() }
    /// The error, on failure.
    public var error: Failure? {
        if case .failure(let error) = result { return error }
        return nil
    }
}
