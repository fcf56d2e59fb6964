// Over 450 lines: the request's validation (URL, header injection, sizes) stays with the type it guards; most of it is documentation.
import FoundationEssentials
import Glibc
public import HTTPTypes

/// A fully rendered HTTP request, ready for a ``Transport``: head, body and per-request options.
///
/// A `TransportRequest` is validated when it is created: the URL must be an absolute `http` or
/// `https` URL without spaces, control characters or embedded credentials, and header names and
/// values must not contain CR, LF or NUL. Invalid input throws a ``TransportError`` of kind
/// ``TransportError/Kind/invalidRequest`` before any I/O happens.
public struct TransportRequest: Sendable {
    /// Where the response body goes.
    public enum ResponseDestination: Sendable, Hashable {
        /// Collected in memory and delivered as ``TransportResponse/body``.
        case memory
        /// Streamed to a file at `path`; ``TransportResponse/body`` is `nil`. The body is written
        /// to a new file next to `path` (`path` + `.brickpart-` + a random suffix, so the directory
        /// must be writable) and moved onto `path` in one step once it is complete, replacing any
        /// file there: nobody sees a partial body at `path`, and a failed or cancelled transfer
        /// deletes its partial file and leaves `path` as it was.
        case file(path: String)
        /// Handed to `stream` piece by piece as it arrives, never collected (see
        /// ``ResponseBodyStream``); ``TransportResponse/body`` is `nil`.
        case stream(ResponseBodyStream)
    }

    /// Progress of one transfer, as bytes moved so far and expected totals (0 when unknown).
    public struct Progress: Sendable, Hashable {
        /// Response bytes received so far (on the wire, before decoding).
        public var bytesReceived: Int64
        /// Expected response bytes, or 0 when unknown.
        public var totalBytesExpectedToReceive: Int64
        /// Request body bytes sent so far.
        public var bytesSent: Int64
        /// Request body bytes to send, or 0 when unknown.
        public var totalBytesExpectedToSend: Int64

        /// Creates a progress report (for a transport of your own, or a test double).
        ///
        /// - Parameters:
        ///   - bytesReceived: Response bytes received so far.
        ///   - totalBytesExpectedToReceive: Expected response bytes, or 0 when unknown.
        ///   - bytesSent: Request body bytes sent so far.
        ///   - totalBytesExpectedToSend: Request body bytes to send, or 0 when unknown.
        public init(
            bytesReceived: Int64,
            totalBytesExpectedToReceive: Int64,
            bytesSent: Int64,
            totalBytesExpectedToSend: Int64
        ) {
            self.bytesReceived = bytesReceived
            self.totalBytesExpectedToReceive = totalBytesExpectedToReceive
            self.bytesSent = bytesSent
            self.totalBytesExpectedToSend = totalBytesExpectedToSend
        }
    }

    /// Per-request settings that override the transport's configuration.
    public struct Options: Sendable {
        /// Limit for the whole request (connect, send, wait, receive), or `nil` for the transport's default.
        public var timeout: Duration?
        /// Largest accepted *decoded* response body, or `nil` for the transport's default.
        public var maxResponseSize: Int64?
        /// Where the response body goes; memory by default.
        public var destination: ResponseDestination
        /// Called with upload and download progress, on the transport's thread, each time the
        /// figures change. Keep it short.
        public var progress: (@Sendable (Progress) -> Void)?
        /// Whether redirects are followed (within the transport's redirect policy). Default `true`.
        public var followsRedirects: Bool
        /// Whether the request must open a new connection instead of reusing a pooled one (after a
        /// network change or a broken connection, pooled connections may be dead). Default `false`.
        public var requiresFreshConnection: Bool = false
        /// Whether a transfer to a ``ResponseDestination/file(path:)`` destination that fails
        /// after part of a resumable body arrived keeps that part and reports it in
        /// ``TransportError/partialDownload`` (whose receiver must continue or discard it),
        /// instead of deleting it. Default `false`; a ``Session`` sets it for downloads it may
        /// retry.
        public var keepsPartialDownload: Bool = false
        /// A partial download to continue, for a ``ResponseDestination/file(path:)`` destination:
        /// the request asks for the rest (`Range: bytes=<length>-`, `If-Range: <validator>`); a
        /// `206` that continues the file is appended to it, and any other response (the server
        /// sent the whole resource because it changed, or an error) starts the file over. Either
        /// way the destination gets a whole body. Ignored, and the file deleted, when the file no
        /// longer holds exactly ``PartialDownload/length`` bytes. Default `nil`.
        public var resumingDownload: PartialDownload?
        /// Which addresses the request may reach (see ``EgressPolicy``), or `nil` for the
        /// session's (``Session/Configuration/egressPolicy``); a transport treats `nil` as
        /// ``EgressPolicy/unrestricted``. Default `nil`.
        public var egressPolicy: EgressPolicy?

        /// Creates options.
        ///
        /// - Parameters:
        ///   - timeout: Whole-request limit, or `nil` for the transport's default.
        ///   - maxResponseSize: Largest decoded body, or `nil` for the transport's default.
        ///   - destination: Where the response body goes.
        ///   - followsRedirects: Whether redirects are followed.
        ///   - progress: Progress callback, run on the transport's thread.
        public init(
            timeout: Duration? = nil,
            maxResponseSize: Int64? = nil,
            destination: ResponseDestination = .memory,
            followsRedirects: Bool = true,
            progress: (@Sendable (Progress) -> Void)? = nil
        ) {
            self.timeout = timeout
            self.maxResponseSize = maxResponseSize
            self.destination = destination
            self.followsRedirects = followsRedirects
            self.progress = progress
        }
    }

    /// The fields, in one immutable box: a request is copied several times on its way (into the
    /// transport, the retry loop, the response). The head is kept in parts and built on demand:
    /// building an `HTTPRequest` checks every pseudo-header, and most requests never need one.
    @usableFromInline
    struct Fields: Sendable {
        @usableFromInline var method: HTTPRequest.Method
        var target: Target
        var extendedConnectProtocol: String?
        @usableFromInline var headerFields: HTTPFields
        @usableFromInline var body: RequestBody?
        @usableFromInline var options: Options
        @usableFromInline var urlString: String
    }

    /// Scheme, authority and path: offsets into ``urlString`` for a request made from a URL (no
    /// part is copied out until asked for), or the parts of a head set by hand as they were given.
    enum Target: Sendable {
        /// `urlString` is `scheme://authority` + path, the authority ending at UTF-8 offset `authorityEnd`.
        case parsed(isHTTPS: Bool, authorityEnd: Int)
        case explicit(scheme: String?, authority: String?, path: String?)
    }

    // `@usableFromInline`, with the fields the transport reads: reading a field from another module
    // then copies that field, not the whole `Options` through a value witness.
    @usableFromInline var storage: SharedValue<Fields>

    private var scheme: String? {
        switch storage.value.target {
        case .parsed(let isHTTPS, _): isHTTPS ? "https" : "http"
        case .explicit(let scheme, _, _): scheme
        }
    }

    private var authority: String? {
        switch storage.value.target {
        case .parsed(let isHTTPS, let authorityEnd):
            let start = isHTTPS ? 8 : 7  // after "https://" or "http://"
            return URLValidator.slice(storage.value.urlString, start..<authorityEnd)
        case .explicit(_, let authority, _): return authority
        }
    }

    private var path: String? {
        switch storage.value.target {
        case .parsed(_, let authorityEnd):
            URLValidator.slice(storage.value.urlString, authorityEnd..<storage.value.urlString.utf8.count)
        case .explicit(_, _, let path): path
        }
    }

    /// Method, scheme, authority, path (with query) and header fields, as an `HTTPRequest`.
    ///
    /// Built each time it is read; ``method``, ``headerFields`` and ``urlString`` are cheaper ways to
    /// read those parts.
    public var head: HTTPRequest {
        get {
            var head = HTTPRequest(
                method: storage.value.method,
                scheme: scheme,
                authority: authority,
                path: path,
                headerFields: storage.value.headerFields
            )
            if let extended = storage.value.extendedConnectProtocol { head.extendedConnectProtocol = extended }
            return head
        }
        set {
            let moved = newValue.scheme != scheme || newValue.authority != authority || newValue.path != path
            storage = storage.modified { fields in
                if moved {
                    fields.target = .explicit(
                        scheme: newValue.scheme,
                        authority: newValue.authority,
                        path: newValue.path
                    )
                    fields.urlString = Self.joined(
                        scheme: newValue.scheme ?? "http",
                        authority: newValue.authority ?? "",
                        path: newValue.path ?? "/"
                    )
                }
                fields.method = newValue.method
                fields.extendedConnectProtocol = newValue.extendedConnectProtocol
                fields.headerFields = newValue.headerFields
            }
        }
    }
    /// The request method (`head.method`, without building the head).
    public var method: HTTPRequest.Method {
        @inlinable get { storage.value.method }
        set { storage = storage.modified { $0.method = newValue } }
    }
    /// The header fields (`head.headerFields`, without building the head).
    public var headerFields: HTTPFields {
        @inlinable get { storage.value.headerFields }
        set { storage = storage.modified { $0.headerFields = newValue } }
    }
    /// The body, or `nil` for none.
    public var body: RequestBody? {
        @inlinable get { storage.value.body }
        set { storage = storage.modified { $0.body = newValue } }
    }
    /// Per-request options.
    public var options: Options {
        @inlinable get { storage.value.options }
        set { storage = storage.modified { $0.options = newValue } }
    }

    /// The absolute URL string, `scheme://authority/path?query` (kept in step with ``head``).
    @inlinable public var urlString: String { storage.value.urlString }

    /// Whether the request goes over TLS (`https`).
    package var isSecure: Bool {
        switch storage.value.target {
        case .parsed(let isHTTPS, _): isHTTPS
        case .explicit(let scheme, _, _): scheme == "https"
        }
    }

    private static func joined(scheme: String, authority: String, path: String) -> String {
        var url = String()
        url.reserveCapacity(scheme.utf8.count + 3 + authority.utf8.count + path.utf8.count)
        url += scheme
        url += "://"
        url += authority
        url += path
        return url
    }

    /// The URL as logs show it: without its query, which may carry secrets (tokens, signatures).
    package var loggedURL: String {
        let url = urlString
        guard let question = url.utf8.firstIndex(of: UInt8(ascii: "?")) else { return url }
        return String(url[..<question])
    }

    /// The URL as telemetry records it (OpenTelemetry's `url.full`): without credentials in the
    /// authority (`user:password@`) and without its query, which may carry secrets.
    package var redactedURL: String {
        let url = loggedURL
        guard let authority, let at = authority.utf8.lastIndex(of: UInt8(ascii: "@")) else { return url }
        let scheme = isSecure ? "https://" : "http://"
        let rest = url.utf8.dropFirst(scheme.utf8.count + authority.utf8.count)
        return scheme + String(authority[authority.index(after: at)...]) + String(Substring(rest))
    }

    /// The port the request goes to: the URL's, or the scheme's default (80, 443).
    package var port: Int {
        var authority = Substring(self.authority ?? "")
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if let close = authority.lastIndex(of: "]") { authority = authority[authority.index(after: close)...] }
        if let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]) {
            return port
        }
        return isSecure ? 443 : 80
    }

    /// The destination as traffic control keys it: the authority (`host[:port]`), lowercased,
    /// the port left out when it is the scheme's default and a trailing dot of the name dropped, so
    /// that `HOST`, `host:80` and `host.` (for `http`) are one host with one cap.
    package var trafficKey: String {
        withAuthorityBytes { authority, isHTTPS in
            let parts = Self.trafficKeyParts(authority, isHTTPS: isHTTPS)
            var key: [UInt8] = []
            key.reserveCapacity(parts.length)
            for index in parts.host { key.append(Self.lowercased(authority[index])) }
            if let port = parts.port {
                key.append(UInt8(ascii: ":"))
                key.append(contentsOf: authority[port])
            }
            return String(decoding: key, as: UTF8.self)
        }
    }

    /// The authority's bytes as the URL spells them, and whether the scheme is `https`: requests
    /// with the same ones have the same ``trafficKey`` (a lookup that finds the last host again by
    /// comparing these bytes skips the key's normalization).
    package var spelledAuthority: (bytes: [UInt8], isHTTPS: Bool?) {
        withAuthorityBytes { authority, isHTTPS in (Array(authority), isHTTPS) }
    }

    /// Whether ``spelledAuthority`` is `bytes` and `isHTTPS`: compared in place.
    package func hasSpelledAuthority(_ bytes: [UInt8], isHTTPS: Bool?) -> Bool {
        withAuthorityBytes { authority, scheme in
            guard scheme == isHTTPS, authority.count == bytes.count else { return false }
            guard let start = authority.baseAddress else { return true }
            return bytes.withUnsafeBufferPointer { other in
                other.baseAddress.map { memcmp($0, start, authority.count) == 0 } ?? false
            }
        }
    }

    /// Calls `body` with the authority's UTF-8 bytes and whether the scheme is `https` (`nil`:
    /// neither `http` nor `https`, or no scheme).
    private func withAuthorityBytes<T>(_ body: (UnsafeBufferPointer<UInt8>, Bool?) -> T) -> T {
        switch storage.value.target {
        case .parsed(let isHTTPS, let authorityEnd):
            // Bytes only, straight from the URL: `Character`-level work would cost more than the
            // rest of admission.
            let range = (isHTTPS ? 8 : 7)..<authorityEnd
            // In place when the string is native UTF-8 (always, for a URL this library parsed).
            if let result = storage.value.urlString.utf8.withContiguousStorageIfAvailable({ bytes in
                body(UnsafeBufferPointer(rebasing: bytes[range]), isHTTPS)
            }) {
                return result
            }
            var url = storage.value.urlString
            return url.withUTF8 { bytes in body(UnsafeBufferPointer(rebasing: bytes[range]), isHTTPS) }
        case .explicit(let scheme, let authority, _):
            var authority = authority ?? ""
            let isHTTPS: Bool? =
                switch scheme?.lowercased() {
                case "https"?: true
                case "http"?: false
                default: nil
                }
            return authority.withUTF8 { body($0, isHTTPS) }
        }
    }

    /// The parts of an authority's bytes that make its traffic key: the host without a trailing
    /// dot, and the port unless it is empty or the scheme's default; `length` is the key's.
    static func trafficKeyParts(
        _ authority: UnsafeBufferPointer<UInt8>,
        isHTTPS: Bool?
    ) -> (host: Range<Int>, port: Range<Int>?, length: Int) {
        var hostEnd = authority.count
        var port: Range<Int>? = nil
        // An IPv6 literal's colons are inside its brackets; a port follows the closing one.
        var portSearchStart = 0
        if authority.first == UInt8(ascii: "[") {
            portSearchStart = (authority.firstIndex(of: UInt8(ascii: "]")) ?? authority.count - 1) + 1
        }
        if portSearchStart < authority.count,
            let colon = authority[portSearchStart...].lastIndex(of: UInt8(ascii: ":"))
        {
            hostEnd = colon
            port = (colon + 1)..<authority.count
        }
        if let digits = port {
            let value = authority[digits]
            let isDefault =
                (isHTTPS == true && value.elementsEqual("443".utf8))
                || (isHTTPS == false && value.elementsEqual("80".utf8))
            if value.isEmpty || isDefault { port = nil }
        }
        if portSearchStart == 0, hostEnd > 0, authority[hostEnd - 1] == UInt8(ascii: ".") { hostEnd -= 1 }
        let length = hostEnd + (port.map { 1 + $0.count } ?? 0)
        return (0..<hostEnd, port, length)
    }

    private static func lowercased(_ byte: UInt8) -> UInt8 {
        byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte
    }

    /// The host the request goes to (without port or IPv6 brackets), for reachability.
    public var host: String {
        var authority = Substring(self.authority ?? "")
        if authority.hasPrefix("[") {
            authority = authority.dropFirst()
            if let close = authority.firstIndex(of: "]") { authority = authority[..<close] }
            return String(authority)
        }
        if let colon = authority.lastIndex(of: ":") { authority = authority[..<colon] }
        return String(authority)
    }

    /// Whether the request may be sent more than once without changing its effect: `GET`, `HEAD`,
    /// `OPTIONS`, `TRACE`, `PUT`, `DELETE`, or any method carrying an `Idempotency-Key` header.
    ///
    /// A request that is not idempotent is sent on a fresh connection, because libcurl silently
    /// re-sends a request whose reused keep-alive connection closes before the reply.
    public var isIdempotent: Bool {
        switch method {
        case .get, .head, .options, .trace, .put, .delete: return true
        default: return headerFields[HTTPField.Name.idempotencyKey] != nil
        }
    }

    /// Creates a request from a URL string and validated header fields.
    ///
    /// - Parameters:
    ///   - method: The HTTP method.
    ///   - url: An absolute `http` or `https` URL.
    ///   - headerFields: Header fields. `HTTPFields` cannot hold CR, LF or NUL.
    ///   - body: The body, or `nil`.
    ///   - options: Per-request options.
    /// - Throws: ``TransportError`` of kind ``TransportError/Kind/invalidRequest`` for an invalid
    ///   URL or conflicting `Content-Length` fields.
    public init(
        method: HTTPRequest.Method,
        url: String,
        headerFields: HTTPFields = [:],
        body: RequestBody? = nil,
        options: consuming Options = Options()
    ) throws(TransportError) {
        let parts = try URLValidator.parse(url)
        try Self.checkFraming(headerFields)
        let (urlString, authorityEnd) = parts.canonical(url)
        self.storage = SharedValue(
            Fields(
                method: method,
                target: .parsed(isHTTPS: parts.isHTTPS, authorityEnd: authorityEnd),
                headerFields: headerFields,
                body: body,
                options: consume options,
                urlString: urlString
            )
        )
    }

    /// Creates a request from a URL string and header name/value strings, validating each one.
    ///
    /// - Parameters:
    ///   - method: The HTTP method.
    ///   - url: An absolute `http` or `https` URL.
    ///   - headers: Header names and values, in order. Names must be RFC 9110 tokens; values must
    ///     not contain CR, LF or NUL (the bytes of header injection).
    ///   - body: The body, or `nil`.
    ///   - options: Per-request options.
    /// - Throws: ``TransportError`` of kind ``TransportError/Kind/invalidRequest`` naming the
    ///   offending header (never its value).
    public init(
        method: HTTPRequest.Method,
        url: String,
        headers: [(name: String, value: String)],
        body: RequestBody? = nil,
        options: consuming Options = Options()
    ) throws(TransportError) {
        try self.init(
            method: method,
            url: url,
            headerFields: try Self.validatedFields(headers),
            body: body,
            options: consume options
        )
    }

    /// Validates header strings and builds `HTTPFields` from them.
    ///
    /// - Parameter headers: Header names and values, in order.
    /// - Returns: The fields.
    /// - Throws: ``TransportError`` of kind ``TransportError/Kind/invalidRequest`` when a name is not
    ///   a token or a value contains CR, LF or NUL.
    public static func validatedFields(_ headers: [(name: String, value: String)]) throws(TransportError) -> HTTPFields
    {
        var fields = HTTPFields()
        if headers.isEmpty { return fields }  // reserving even 0 would allocate storage
        fields.reserveCapacity(headers.count)
        for (name, value) in headers {
            guard let fieldName = HTTPField.Name(name) else {
                throw TransportError(.invalidRequest, message: "invalid header name: \(redactedName(name))")
            }
            if value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }) {
                throw TransportError(
                    .invalidRequest,
                    message: "header \(name) has a value containing CR, LF or NUL (header injection)"
                )
            }
            // HTTPField would turn other control characters into spaces, silently.
            if value.utf8.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
                throw TransportError(
                    .invalidRequest,
                    message: "header \(name) has a value containing a control character"
                )
            }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        return fields
    }

    /// A refused header name as an error may show it: the valid token characters it starts with
    /// and what follows them, never the rest (a name such as `"Authorization: Bearer …"` carries
    /// a credential after its first invalid character).
    static func redactedName(_ name: String) -> String {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty else { return "empty" }
        let token = bytes.prefix { $0.isTokenByte }
        let shown = String(decoding: token.prefix(64), as: UTF8.self)
        guard token.count < bytes.count else { return "\(shown.debugDescription) (too long)" }
        let offending = bytes[token.count]
        let character =
            offending >= 0x21 && offending < 0x7F
            ? "\"\(Character(Unicode.Scalar(offending)))\"" : "byte 0x\(String(offending, radix: 16))"
        return "\(shown.debugDescription) followed by \(character) at offset \(token.count) (the rest is not shown)"
    }

    static func checkFraming(_ fields: HTTPFields) throws(TransportError) {
        if fields.isEmpty { return }
        let lengths = fields[values: .contentLength]
        if lengths.count > 1, Set(lengths).count > 1 {
            throw TransportError(.invalidRequest, message: "conflicting Content-Length header fields")
        }
        if let length = lengths.first, length.decimalDigitsValue == nil {
            throw TransportError(.invalidRequest, message: "Content-Length is not a number")
        }
    }
}

extension HTTPField.Name {
    /// `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header): marks a request as safe to retry.
    public static var idempotencyKey: HTTPField.Name { HTTPField.Name("Idempotency-Key")! }
}
