import HTTPTypes

/// Receives a response body piece by piece as it arrives, instead of having it collected:
/// ``TransportRequest/ResponseDestination/stream(_:)``.
///
/// For bodies too large to hold, or consumed as they come (a streaming parser, server-sent
/// events, a checksum, a pipe to another connection). No piece is copied on the way: each is lent
/// from the transport's receive buffer for the duration of the call.
///
/// ```swift
/// // Feed the body to another process through a pipe as it arrives.
/// let stream = ResponseBodyStream { bytes in
///     write(pipe, bytes.baseAddress, bytes.count) == bytes.count   // `false` stops the transfer
/// }
/// let request = try TransportRequest(method: .get, url: url, options: .init(destination: .stream(stream)))
/// let response = try await transport.send(request)   // response.body is nil
/// ```
///
/// The receiver runs on the transport's own thread, once per piece, in order: keep it short and
/// never block (no other transfer of the transport moves meanwhile). It gets the *decoded* bytes of
/// the final response only, whatever its status: the bodies of followed redirects are dropped, and
/// ``TransportRequest/Options/maxResponseSize`` (or the transport's limit) still applies to the
/// total. The delivered ``TransportResponse`` has no ``TransportResponse/body``.
///
/// A request with a stream is not repeated by the transport; a caller that repeats one (a retry)
/// hands every attempt's bytes to the receiver, so a receiver that must see one body only should
/// start over when a piece arrives after a failed attempt.
///
/// Compared by identity: two streams are equal only if they are the same instance.
public final class ResponseBodyStream: Sendable, Hashable {
    private let receiver: @Sendable (UnsafeRawBufferPointer) -> Bool
    private let onResponse: (@Sendable (HTTPResponse.Status, HTTPFields) -> Bool)?
    /// Header fields a ``Session`` adds when it retries the request, so the server can continue
    /// the stream where it broke off (server-sent events' `Last-Event-ID`).
    let retryHeaders: (@Sendable () -> [(name: String, value: String)])?

    /// Creates a stream.
    ///
    /// - Parameter receiver: Called with each piece of the body, on the transport's thread; the
    ///   bytes are valid only during the call. Returns whether to go on: `false` stops the transfer,
    ///   which then fails with ``TransportError/Kind/cancelled``.
    public init(_ receiver: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool) {
        self.receiver = receiver
        self.onResponse = nil
        self.retryHeaders = nil
    }

    /// Creates a stream that is first told the status and header fields of the response whose
    /// body it receives, so it can tell a body to parse from an error document.
    ///
    /// - Parameters:
    ///   - onResponse: Called once, on the transport's thread, before the first piece of the final
    ///     response's body (not for a response whose body is empty). Returns whether to go on:
    ///     `false` stops the transfer, which then fails with ``TransportError/Kind/cancelled``.
    ///   - receiver: Called with each piece of the body, as in ``init(_:)``.
    public init(
        onResponse: @escaping @Sendable (HTTPResponse.Status, HTTPFields) -> Bool,
        _ receiver: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool
    ) {
        self.receiver = receiver
        self.onResponse = onResponse
        self.retryHeaders = nil
    }

    /// A stream told of each response, that also names header fields for a retry.
    init(
        onResponse: @escaping @Sendable (HTTPResponse.Status, HTTPFields) -> Bool,
        retryHeaders: @escaping @Sendable () -> [(name: String, value: String)],
        _ receiver: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool
    ) {
        self.receiver = receiver
        self.onResponse = onResponse
        self.retryHeaders = retryHeaders
    }

    /// Whether the stream wants to be told of the response before its body
    /// (``responseStarted(status:headerFields:)``); a transport may skip building the header
    /// fields otherwise.
    public var observesResponse: Bool { onResponse != nil }

    /// Tells the stream the status and header fields of the response whose body follows: what a
    /// ``Transport`` does once, before the first piece of the final response's body.
    ///
    /// - Parameters:
    ///   - status: The response status.
    ///   - headerFields: The response header fields.
    /// - Returns: Whether the transfer should go on.
    public func responseStarted(status: HTTPResponse.Status, headerFields: HTTPFields) -> Bool {
        onResponse?(status, headerFields) ?? true
    }

    /// Hands the next piece of the body to the receiver: what a ``Transport`` does for a request
    /// whose destination is this stream, once per piece, in order, on one thread at a time.
    ///
    /// - Parameter bytes: The piece; only read during the call.
    /// - Returns: Whether the transfer should go on; on `false` the transport stops it and fails
    ///   it with ``TransportError/Kind/cancelled``.
    public func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        receiver(bytes)
    }

    /// Whether `lhs` and `rhs` are the same stream.
    ///
    /// - Parameters:
    ///   - lhs: A stream.
    ///   - rhs: Another stream.
    /// - Returns: `lhs === rhs`.
    public static func == (lhs: ResponseBodyStream, rhs: ResponseBodyStream) -> Bool {
        lhs === rhs
    }

    /// Hashes the stream's identity.
    ///
    /// - Parameter hasher: The hasher.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }
}
