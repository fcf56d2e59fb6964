@_spi(TransportImplementation) public import BrickRequestCore
public import FoundationEssentials
import Glibc
public import HTTPTypes

/// One request and what came of it — a response, or a transport failure — as an HTTP Archive
/// keeps it.
public struct HARExchange: Sendable, Hashable {
    /// When the request started.
    public var startedAt: Date
    /// The method.
    public var method: HTTPRequest.Method
    /// The absolute URL, as sent (after redaction: a redacted query parameter reads `REDACTED`).
    public var url: String
    /// The request's header fields, as sent (after redaction).
    public var requestHeaders: HTTPFields
    /// The request body; `nil` when there was none or it was not kept (a stream).
    public var requestBody: Data?
    /// The response, or `nil` when the exchange ended in ``failure``.
    public var response: HTTPResponse?
    /// The response body (empty for none).
    public var responseBody: Data
    /// The transport failure that ended the exchange, when no response arrived.
    public var failure: TransportError?
    /// The transfer's timings and connection facts.
    public var metrics: TransportMetrics

    /// Creates an exchange.
    ///
    /// - Parameters:
    ///   - startedAt: When the request started.
    ///   - method: The method.
    ///   - url: The absolute URL.
    ///   - requestHeaders: The request's header fields.
    ///   - requestBody: The request body, if any.
    ///   - response: The response, or `nil` with a `failure`.
    ///   - responseBody: The response body.
    ///   - failure: The transport failure, when no response arrived.
    ///   - metrics: Timings.
    public init(
        startedAt: Date = Date(),
        method: HTTPRequest.Method,
        url: String,
        requestHeaders: HTTPFields = [:],
        requestBody: Data? = nil,
        response: HTTPResponse?,
        responseBody: Data = Data(),
        failure: TransportError? = nil,
        metrics: TransportMetrics = TransportMetrics()
    ) {
        self.startedAt = startedAt
        self.method = method
        self.url = url
        self.requestHeaders = requestHeaders
        self.requestBody = requestBody
        self.response = response
        self.responseBody = responseBody
        self.failure = failure
        self.metrics = metrics
    }

    /// What the exchange answers, as a transport delivers it: the response with its body (and
    /// timings), or the failure.
    ///
    /// - Parameter url: The URL the response reports (the replayed request's).
    /// - Returns: The result.
    package func result(url: String) -> Result<TransportResponse, TransportError> {
        guard let response else {
            return .failure(failure ?? TransportError(.other, message: "the recorded exchange has neither a response nor a failure"))
        }
        return .success(
            TransportResponse(
                status: response.status,
                headerFields: response.headerFields,
                body: responseBody,
                metrics: metrics,
                url: url
            )
        )
    }
}

extension HARExchange {
    /// The exchange of `request` and `result`, redacted, with bodies cut at `bodyLimit` bytes.
    ///
    /// With a limit, each body kept is a copy of its first `bodyLimit` bytes (never a slice that
    /// keeps the whole response alive), and a downloaded file is read only that far.
    init(
        request: TransportRequest,
        result: Result<TransportResponse, TransportError>,
        startedAt: Date,
        redaction: HARRedaction,
        bodyLimit: Int = .max
    ) {
        self.startedAt = startedAt
        method = request.method
        url = request.urlString
        requestHeaders = request.headerFields
        requestBody = request.body.flatMap { Self.collected($0, limit: bodyLimit) }
        switch result {
        case .success(let transportResponse):
            response = HTTPResponse(status: transportResponse.status, headerFields: transportResponse.headerFields)
            if let body = transportResponse.body {
                responseBody = bodyLimit == .max ? body : Self.copied(body, limit: bodyLimit)
            } else if let file = transportResponse.bodyFile {
                responseBody = Self.read(file, limit: bodyLimit) ?? Data()
            } else {
                responseBody = Data()
            }
            failure = nil
            metrics = transportResponse.metrics
        case .failure(let error):
            response = nil
            responseBody = Data()
            failure = error
            metrics = TransportMetrics()
        }
        self = redaction.redact(self)
    }

    /// A copy of `body`'s first `limit` bytes, sharing no storage with it.
    private static func copied(_ body: Data, limit: Int) -> Data {
        let count = min(body.count, limit)
        return body.withUnsafeBytes { Data(bytes: $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, count: count) }
    }

    /// The body's bytes, up to `limit`; `nil` for a streamed body or an unreadable file (not kept).
    private static func collected(_ body: RequestBody, limit: Int) -> Data? {
        var data = Data()
        for segment in body.segments {
            guard data.count < limit else { break }
            switch segment {
            case .data(let bytes): data.append(bytes.prefix(limit - data.count))
            case .file(let path):
                guard let bytes = read(path, limit: limit - data.count) else { return nil }
                data.append(bytes)
            case .stream: return nil
            }
        }
        return data
    }

    /// The first `limit` bytes of the file at `path` (the rest is never read); `nil` when it
    /// cannot be opened.
    private static func read(_ path: String, limit: Int) -> Data? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while data.count < limit {
            let wanted = min(buffer.count, limit - data.count)
            let got = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, wanted) }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { break }
            data.append(contentsOf: buffer[..<got])
        }
        return data
    }

    /// The bytes this exchange holds: bodies, and a rough figure for the rest.
    var byteCount: Int {
        var count = url.utf8.count + responseBody.count + (requestBody?.count ?? 0) + 256
        for field in requestHeaders { count += field.name.rawName.utf8.count + field.value.utf8.count }
        for field in response?.headerFields ?? [:] { count += field.name.rawName.utf8.count + field.value.utf8.count }
        return count
    }
}

extension HARExchange {
    /// Header fields whose values differ from one run to the next while the exchange is the same:
    /// the moment (`Date`, `Age`), what a client makes fresh for each request (`Idempotency-Key`,
    /// trace context, webhook signatures) and the request IDs servers and proxies add.
    package static let volatileFields: Set<String> = [
        "date", "age", "idempotency-key", "traceparent", "tracestate", "webhook-id", "webhook-timestamp",
        "webhook-signature", "x-request-id", "request-id", "x-correlation-id", "x-amzn-requestid", "x-amzn-trace-id",
        "cf-ray", "server-timing",
    ]

    /// Whether `other` is the same exchange as this one, as a re-recording sees it: the same
    /// method, URL, header fields (but the volatile ones), bodies, status and failure kind; when
    /// it happened and how long it took do not count.
    package func isSameExchange(as other: HARExchange) -> Bool {
        func stable(_ fields: HTTPFields?) -> [String] {
            (fields ?? HTTPFields()).filter { !Self.volatileFields.contains($0.name.canonicalName) }
                .map { "\($0.name.canonicalName): \($0.value)" }
        }
        return method == other.method && url == other.url && requestBody == other.requestBody
            && stable(requestHeaders) == stable(other.requestHeaders)
            && response?.status == other.response?.status && stable(response?.headerFields) == stable(other.response?.headerFields)
            && responseBody == other.responseBody && failure?.kind == other.failure?.kind
    }
}

extension HARArchive {
    /// Whether `other` holds the same exchanges (``HARExchange/isSameExchange(as:)``), in any
    /// order: a re-recording of an unchanged service.
    package func hasSameExchanges(as other: HARArchive) -> Bool {
        guard exchanges.count == other.exchanges.count else { return false }
        var unmatched = other.exchanges
        for exchange in exchanges {
            guard let index = unmatched.firstIndex(where: { exchange.isSameExchange(as: $0) }) else { return false }
            unmatched.remove(at: index)
        }
        return true
    }
}
