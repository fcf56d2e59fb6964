import HTTPTypes
import Synchronization

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
/// the final response only, whatever its status: the bodies of followed redirects are dropped. A
/// stream bounds what it keeps, not what passes through it: only a
/// ``TransportRequest/Options/maxResponseSize`` set on the request limits the total (the
/// transport's own limit does not apply, so a long-lived stream is not cut off). The delivered
/// ``TransportResponse`` has no ``TransportResponse/body``.
///
/// **Backpressure.** A receiver whose consumer falls behind (a queue that another thread drains)
/// is created with ``init(onResponse:paced:)`` and answers ``Demand/pause``: the transport then
/// delivers nothing more and stops reading the connection (the server's sends block once the
/// socket buffers are full) until ``resumeDelivery()`` is called, from any thread. A paused
/// transfer does not count as idle.
///
/// A request with a stream is not repeated by the transport; a caller that repeats one (a retry)
/// hands every attempt's bytes to the receiver, so a receiver that must see one body only should
/// start over when a piece arrives after a failed attempt.
///
/// Compared by identity: two streams are equal only if they are the same instance.
public final class ResponseBodyStream: Sendable, Hashable {
    /// What a paced receiver answers for each piece of the body.
    public enum Demand: Sendable, Hashable {
        /// Deliver the next piece when it arrives.
        case more
        /// The piece was taken; deliver nothing more until ``ResponseBodyStream/resumeDelivery()``.
        case pause
        /// Stop the transfer; it fails with ``TransportError/Kind/cancelled``.
        case stop
    }

    private let receiver: @Sendable (UnsafeRawBufferPointer) -> Demand
    private let onResponse: (@Sendable (HTTPResponse.Status, HTTPFields) -> Bool)?
    /// Whether the receiver may answer ``Demand/pause``.
    package let isPaced: Bool
    /// How the transfer that feeds this stream is told to resume delivery; set by the transport.
    private let resumer = Lock<(@Sendable () -> Void)?>(nil)
    /// Header fields a ``Session`` adds when it retries the request, so the server can continue
    /// the stream where it broke off (server-sent events' `Last-Event-ID`).
    let retryHeaders: (@Sendable () -> [(name: String, value: String)])?

    /// Creates a stream.
    ///
    /// - Parameter receiver: Called with each piece of the body, on the transport's thread; the
    ///   bytes are valid only during the call. Returns whether to go on: `false` stops the transfer,
    ///   which then fails with ``TransportError/Kind/cancelled``.
    public init(_ receiver: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool) {
        self.receiver = { receiver($0) ? .more : .stop }
        self.onResponse = nil
        self.retryHeaders = nil
        self.isPaced = false
    }

    /// Creates a stream whose receiver can pause the body while its consumer catches up.
    ///
    /// ```swift
    /// let stream = ResponseBodyStream(paced: { bytes in
    ///     let backlog = queue.append(bytes)            // drained by another thread
    ///     return backlog > 4 << 20 ? .pause : .more    // the drainer calls stream.resumeDelivery()
    /// })
    /// ```
    ///
    /// - Parameters:
    ///   - onResponse: Called once before the first piece of the final response's body, as in
    ///     ``init(onResponse:_:)``; `nil` for none.
    ///   - receiver: Called with each piece of the body, on the transport's thread; the bytes are
    ///     valid only during the call and are taken whatever it answers, except on ``Demand/stop``.
    public init(
        onResponse: (@Sendable (HTTPResponse.Status, HTTPFields) -> Bool)? = nil,
        paced receiver: @escaping @Sendable (UnsafeRawBufferPointer) -> Demand
    ) {
        self.receiver = receiver
        self.onResponse = onResponse
        self.retryHeaders = nil
        self.isPaced = true
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
        self.receiver = { receiver($0) ? .more : .stop }
        self.onResponse = onResponse
        self.retryHeaders = nil
        self.isPaced = false
    }

    /// A paced stream told of each response, that also names header fields for a retry.
    init(
        onResponse: @escaping @Sendable (HTTPResponse.Status, HTTPFields) -> Bool,
        retryHeaders: @escaping @Sendable () -> [(name: String, value: String)],
        paced receiver: @escaping @Sendable (UnsafeRawBufferPointer) -> Demand
    ) {
        self.receiver = receiver
        self.onResponse = onResponse
        self.retryHeaders = retryHeaders
        self.isPaced = true
    }

    /// Lets the body flow again after the receiver answered ``Demand/pause``: what a consumer
    /// that caught up calls, from any thread. Harmless when nothing is paused.
    public func resumeDelivery() {
        let resume = resumer.withLock { $0 }
        resume?()
    }

    /// The transport's side of ``resumeDelivery()``: how the transfer feeding this stream is
    /// reached (each attempt sets its own).
    package func attach(_ resume: @escaping @Sendable () -> Void) {
        resumer.withLock { $0 = resume }
    }

    /// Whether the stream wants to be told of the response before its body
    /// (`responseStarted(status:headerFields:)`); a transport may skip building the header
    /// fields otherwise.
    @_spi(TransportImplementation) public var observesResponse: Bool { onResponse != nil }

    /// Tells the stream the status and header fields of the response whose body follows: what a
    /// ``Transport`` does once, before the first piece of the final response's body.
    ///
    /// - Parameters:
    ///   - status: The response status.
    ///   - headerFields: The response header fields.
    /// - Returns: Whether the transfer should go on.
    @_spi(TransportImplementation) public func responseStarted(status: HTTPResponse.Status, headerFields: HTTPFields) -> Bool {
        onResponse?(status, headerFields) ?? true
    }

    /// Hands the next piece of the body to the receiver: what a ``Transport`` does for a request
    /// whose destination is this stream, once per piece, in order, on one thread at a time.
    ///
    /// - Parameter bytes: The piece; only read during the call.
    /// - Returns: Whether the transfer should go on; on `false` the transport stops it and fails
    ///   it with ``TransportError/Kind/cancelled``.
    @_spi(TransportImplementation) public func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        receiver(bytes) != .stop
    }

    /// Hands the next piece of the body to the receiver, as `receive(_:)` does, and returns its
    /// full answer: a ``Transport`` that honours ``Demand/pause`` delivers nothing more until
    /// ``resumeDelivery()``.
    ///
    /// - Parameter bytes: The piece; only read during the call.
    /// - Returns: What the receiver wants next.
    @_spi(TransportImplementation) public func deliver(_ bytes: UnsafeRawBufferPointer) -> Demand {
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
