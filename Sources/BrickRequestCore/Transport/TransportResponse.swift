import FoundationEssentials
public import HTTPTypes

/// A complete HTTP response delivered by a ``Transport``.
///
/// Header fields are kept as the raw bytes the server sent and parsed when first read, so a caller
/// that only needs the status and the body pays nothing for them.
public struct TransportResponse: Sendable {
    /// The fields, in one immutable box (see `TransportRequest`).
    private struct Fields: Sendable {
        var status: HTTPResponse.Status
        var rawHeaders: [UInt8]
        var body: Data?
        var bodyFile: String?
        var metrics: TransportMetrics
        var url: String
    }

    private var storage: SharedValue<Fields>

    /// The response status.
    public var status: HTTPResponse.Status {
        get { storage.value.status }
        set { storage = storage.modified { $0.status = newValue } }
    }
    /// The raw header block of the final response (status line excluded), `Name: value\r\n` lines.
    @_spi(TransportImplementation) public var rawHeaders: [UInt8] {
        get { storage.value.rawHeaders }
        set { storage = storage.modified { $0.rawHeaders = newValue } }
    }
    /// The decoded body when the destination was memory; `nil` when it went to a file or a
    /// ``ResponseBodyStream``.
    public var body: Data? {
        get { storage.value.body }
        set { storage = storage.modified { $0.body = newValue } }
    }
    /// The file the body was written to, when the destination was a file.
    @_spi(TransportImplementation) public var bodyFile: String? {
        get { storage.value.bodyFile }
        set { storage = storage.modified { $0.bodyFile = newValue } }
    }
    /// Timings and connection facts for this transfer.
    public var metrics: TransportMetrics {
        get { storage.value.metrics }
        set { storage = storage.modified { $0.metrics = newValue } }
    }
    /// The URL that produced this response (the last one, after redirects).
    public var url: String {
        get { storage.value.url }
        set { storage = storage.modified { $0.url = newValue } }
    }

    /// Creates a response.
    ///
    /// - Parameters:
    ///   - status: The status.
    ///   - headerFields: Header fields, stored in raw form.
    ///   - body: The body, or `nil`.
    ///   - bodyFile: The file the body was written to, if any.
    ///   - metrics: Transfer metrics.
    ///   - url: The URL that produced the response.
    public init(
        status: HTTPResponse.Status,
        headerFields: HTTPFields = [:],
        body: Data? = nil,
        bodyFile: String? = nil,
        metrics: TransportMetrics = TransportMetrics(),
        url: String = ""
    ) {
        self.init(
            status: status,
            rawHeaders: headerFields.rawHeaderBytes, body: body, bodyFile: bodyFile, metrics: metrics, url: url)
    }

    package init(
        status: HTTPResponse.Status,
        rawHeaders: [UInt8],
        body: Data?,
        bodyFile: String?,
        metrics: TransportMetrics,
        url: String
    ) {
        self.storage = SharedValue(
            Fields(
                status: status,
                rawHeaders: rawHeaders,
                body: body,
                bodyFile: bodyFile,
                metrics: metrics,
                url: url
            )
        )
    }

    /// The header fields, parsed from `rawHeaders`. Lines that are not valid fields are skipped.
    public var headerFields: HTTPFields {
        HeaderParser.fields(from: rawHeaders)
    }

    /// The response head (status and header fields) as a swift-http-types value.
    public var head: HTTPResponse {
        HTTPResponse(status: status, headerFields: headerFields)
    }
}

/// Timings and connection facts of one transfer, from libcurl's `CURLINFO_*` values.
///
/// Times are measured from the start of the transfer, like curl's `-w` variables: ``connect`` is
/// when the TCP connection was up, ``tlsHandshake`` when TLS was, ``firstByte`` when the first
/// response byte arrived.
public struct TransportMetrics: Sendable, Hashable {
    /// The HTTP version of the response.
    public enum HTTPVersion: Sendable, Hashable {
        /// HTTP/1.0.
        case http1_0
        /// HTTP/1.1.
        case http1_1
        /// HTTP/2.
        case http2
        /// HTTP/3.
        case http3
        /// Not known (no response).
        case unknown
    }

    // Zeros spelled `Duration(attoseconds: 0)`: inlined, where `Duration.zero` is a call into the
    // standard library (each transfer makes one of these).

    /// Time until the name was resolved.
    public var nameLookup: Duration = Duration(attoseconds: 0)
    /// Time until the TCP connection was established.
    public var connect: Duration = Duration(attoseconds: 0)
    /// Time until the TLS handshake completed (zero for plain HTTP).
    public var tlsHandshake: Duration = Duration(attoseconds: 0)
    /// Time until the first response byte.
    public var firstByte: Duration = Duration(attoseconds: 0)
    /// Time for the whole transfer.
    public var total: Duration = Duration(attoseconds: 0)
    /// The HTTP version used.
    public var httpVersion: HTTPVersion = .unknown
    /// Whether an existing connection was reused (no new connection was made).
    public var connectionReused: Bool = false
    /// Bytes of request headers sent.
    public var requestHeaderBytes: Int64 = 0
    /// Bytes of request body sent.
    public var bytesSent: Int64 = 0
    /// Bytes of response body received (decoded).
    public var bytesReceived: Int64 = 0
    /// Redirects followed before this response.
    public var redirectCount: Int = 0

    /// Creates empty metrics.
    public init() {}
}
