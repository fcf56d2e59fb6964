import FoundationEssentials
import Glibc

/// A failure of the transport layer: the request never produced a complete HTTP response.
///
/// `TransportError` keeps what the retry engine and a person debugging need: a ``kind`` that
/// classifies the failure, libcurl's result code and the operating system's `errno` when there is
/// one, and whether any byte of the request reached the network (``requestBytesSent``). A request
/// whose bytes were sent may have been processed by the server, so a non-idempotent request that
/// fails that way has an unknown outcome.
///
/// The description never contains header values or bodies.
public struct TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of a transport failure.
    ///
    /// An extensible set of static members: new kinds can be added without breaking `switch`
    /// statements that end in `default`.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The network is down: no route to the destination, or the interface is not running.
        public static let notConnected = Kind("notConnected")
        /// The host name could not be resolved.
        public static let cannotResolveHost = Kind("cannotResolveHost")
        /// The proxy's host name could not be resolved.
        public static let cannotResolveProxy = Kind("cannotResolveProxy")
        /// The TCP connection could not be established (refused, or no listener).
        public static let cannotConnect = Kind("cannotConnect")
        /// The connection was reset or closed before a complete response arrived.
        public static let connectionReset = Kind("connectionReset")
        /// A connect, whole-request or idle timeout expired.
        public static let timedOut = Kind("timedOut")
        /// TLS failed: handshake, certificate verification, or public-key pinning.
        public static let tls = Kind("tls")
        /// More redirects than the policy allows.
        public static let tooManyRedirects = Kind("tooManyRedirects")
        /// A redirect the policy refuses (for example https to http, or a non-http scheme).
        public static let redirectRefused = Kind("redirectRefused")
        /// The decoded response body exceeded the maximum response size.
        public static let bodyTooLarge = Kind("bodyTooLarge")
        /// The request was rejected before any I/O: invalid URL, header or body.
        public static let invalidRequest = Kind("invalidRequest")
        /// The server sent a response that violates HTTP (bad framing, conflicting lengths, bad encoding).
        public static let invalidResponse = Kind("invalidResponse")
        /// A local file (request body source or response destination) could not be read or written.
        public static let fileIO = Kind("fileIO")
        /// The request body's stream failed, made another length than declared, or (single-pass)
        /// would have had to be sent a second time.
        public static let requestBodyFailed = Kind("requestBodyFailed")
        /// The process ran out of a resource the request needs: file descriptors (`EMFILE`,
        /// `ENFILE`: ``osErrno`` says which) or memory for the response. Nothing was sent.
        public static let outOfResources = Kind("outOfResources")
        /// The request was cancelled by its caller.
        public static let cancelled = Kind("cancelled")
        /// The transport was shut down while the request was in flight.
        public static let shutdown = Kind("shutdown")
        /// Not sent: the server asked for a pause (`429` or `503` with `Retry-After`) that lasts
        /// past what the request may wait; ``TransportError/notBefore`` says until when.
        public static let hostPaused = Kind("hostPaused")
        /// Not sent: the host's rate or concurrency cap (``HostPolicy``) would hold it longer than
        /// it may wait; ``TransportError/notBefore`` says when a token is due, when known.
        public static let rateLimited = Kind("rateLimited")
        /// Not sent: the host's circuit breaker is open (``CircuitBreakerPolicy``);
        /// ``TransportError/notBefore`` says when it lets a probe through (`nil`: a probe is out).
        public static let circuitOpen = Kind("circuitOpen")
        /// Not sent: the address a connection was about to open is one the request's
        /// ``EgressPolicy`` refuses (a private, loopback or metadata address, a deny-listed host,
        /// or an untrusted proxy). Never retried.
        public static let egressRefused = Kind("egressRefused")
        /// Any other failure reported by libcurl.
        public static let other = Kind("other")

        /// The kind's name, e.g. `timedOut`.
        public var description: String { name }
    }

    /// The class of failure.
    public let kind: Kind
    /// libcurl's `CURLcode`, when libcurl reported the failure.
    public let curlCode: Int?
    /// The operating system's `errno` for the failed socket operation, when libcurl saw one.
    public let osErrno: Int32?
    /// Whether any byte of the request was sent. When `true`, the server may have acted on it.
    public let requestBytesSent: Bool
    /// A human-readable explanation (libcurl's error buffer or ours). Never contains header values.
    public let message: String
    /// The part of the body kept for a later request to continue, when the request asked for it
    /// (``TransportRequest/Options/keepsPartialDownload``) and the body can be resumed. Its
    /// receiver owns the file: continue it or ``PartialDownload/discard()`` it.
    public var partialDownload: PartialDownload?
    /// For a request held back by the host's traffic policy (``Kind/hostPaused``,
    /// ``Kind/rateLimited``, ``Kind/circuitOpen``): the earliest date it could be sent, when known.
    public var notBefore: Date?

    /// Creates a transport error.
    ///
    /// - Parameters:
    ///   - kind: The class of failure.
    ///   - message: A human-readable explanation without secrets.
    ///   - curlCode: libcurl's result code, if any.
    ///   - osErrno: The system `errno`, if any.
    ///   - requestBytesSent: Whether any request byte reached the network.
    public init(
        _ kind: Kind,
        message: String,
        curlCode: Int? = nil,
        osErrno: Int32? = nil,
        requestBytesSent: Bool = false
    ) {
        self.kind = kind
        self.message = message
        self.curlCode = curlCode
        self.osErrno = osErrno
        self.requestBytesSent = requestBytesSent
    }

    /// A one-line summary: kind, message, curl code and errno.
    public var description: String {
        "TransportError.\(kind): \(message)" + details
    }

    /// What the summary adds to the message: curl code, errno, whether bytes were sent, what was
    /// kept (`""` when nothing): all a `BrickError` that repeats this message needs to add.
    package var details: String {
        var text = ""
        if let curlCode { text += " (curl \(curlCode))" }
        if let osErrno, osErrno != 0 { text += " (errno \(osErrno))" }
        if requestBytesSent { text += " [request bytes sent]" }
        if let partialDownload { text += " [\(partialDownload.length) bytes kept to resume]" }
        if let notBefore { text += " [not before \(notBefore.formatted(.iso8601))]" }
        return text
    }
}

extension TransportError {
    /// A file operation failed: `what` ("cannot write the response body file"), then the system's
    /// reason for `code`, which is kept as ``osErrno``. The one way the library builds a
    /// ``Kind/fileIO`` error from an `errno`.
    ///
    /// - Parameters:
    ///   - what: What could not be done.
    ///   - code: The `errno` of the failure (read it before any other call can change it).
    ///   - requestBytesSent: Whether the request was (partly) sent.
    package static func fileIO(_ what: String, errno code: Int32, requestBytesSent: Bool = false) -> TransportError {
        TransportError(
            .fileIO,
            message: "\(what): \(String(cString: strerror(code)))",
            osErrno: code,
            requestBytesSent: requestBytesSent
        )
    }
}
