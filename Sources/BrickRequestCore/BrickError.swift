import FoundationEssentials
import Glibc

/// The error of every BrickRequest API.
///
/// An extensible struct: a ``code`` from a fixed set of static members, a message, and the
/// ``underlying`` error (for transport failures, a ``TransportError`` with curl's code and `errno`).
/// Two `BrickError`s are equal when their codes are equal, so `error == .cancelled` reads naturally.
///
/// The ``description`` never shows header values or bodies; the response body of a validation
/// failure is kept in ``responseBody`` for code that wants to read it.
public struct BrickError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The request could not be built: invalid URL, header, parameter or body.
        public static let invalidRequest = Code("invalidRequest")
        /// The network is down or the destination has no route.
        public static let notConnected = Code("notConnected")
        /// The server could not be reached (refused, DNS failure, connect failure).
        public static let cannotConnect = Code("cannotConnect")
        /// The connection broke before a complete response arrived.
        public static let connectionLost = Code("connectionLost")
        /// A timeout expired.
        public static let timedOut = Code("timedOut")
        /// TLS failed (handshake, certificate, pinning).
        public static let tls = Code("tls")
        /// The response broke HTTP, was too large, or a redirect was refused.
        public static let invalidResponse = Code("invalidResponse")
        /// Any other transport failure; see ``BrickError/transportError``.
        public static let transport = Code("transport")
        /// The request was cancelled.
        public static let cancelled = Code("cancelled")
        /// The status code is not one the request accepts (``ValidatedResponseType``).
        public static let unacceptableStatusCode = Code("unacceptableStatusCode")
        /// The `Content-Type` is not one the request accepts (``ValidatedResponseType``).
        public static let unacceptableContentType = Code("unacceptableContentType")
        /// The credential could not be produced or refreshed (``Authenticator``).
        public static let authenticationFailed = Code("authenticationFailed")
        /// The body could not be turned into the response type (malformed JSON, wrong shape, no data).
        public static let serializationFailed = Code("serializationFailed")
        /// An offline store or cache could not keep what it was given (disk full, damaged file,
        /// permissions), or set an entry aside; see ``BrickError/underlying``.
        public static let storage = Code("storage")
        /// Not sent: the server asked every caller to pause (`429` or `503` with `Retry-After`)
        /// for longer than the request may wait; ``BrickError/notBefore`` says until when.
        public static let hostPaused = Code("hostPaused")
        /// Not sent: the host's rate or concurrency cap (``HostPolicy``) would hold the request
        /// longer than it may wait.
        public static let rateLimited = Code("rateLimited")
        /// Not sent: the host's circuit breaker is open after repeated failures;
        /// ``BrickError/notBefore`` says when it lets a probe through.
        public static let circuitOpen = Code("circuitOpen")
        /// Not sent: the request would have reached an address its ``EgressPolicy`` refuses
        /// (server-side request forgery stopped at connect time); the message names the host,
        /// the address and its class. Never retried; an offline queue sets the entry aside.
        public static let egressRefused = Code("egressRefused")
        /// The response cache alone was asked (``CachePolicy/cacheOnly``, a request's
        /// `Cache-Control: only-if-cached`) and holds no usable response.
        public static let notCached = Code("notCached")

        /// The code's name.
        public var description: String { name }

        /// `BrickError.Code.cancelled` etc. match a `BrickError` with that code in a `switch` or `catch`.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? BrickError)?.code == code
        }
    }

    /// What kind of failure this is.
    public let code: Code
    /// A human-readable explanation without secrets.
    public let message: String
    /// The error that caused this one, if any.
    public let underlying: (any Error)?
    /// The response status, for failures that happened after a response arrived.
    public let status: HTTPResponse.Status?
    /// The response body of a failed validation or serialization. Never printed.
    public let responseBody: Data?

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - message: An explanation without secrets.
    ///   - underlying: The cause, if any.
    ///   - status: The response status, if a response arrived.
    ///   - responseBody: The response body, if relevant.
    public init(
        _ code: Code,
        message: String,
        underlying: (any Error)? = nil,
        status: HTTPResponse.Status? = nil,
        responseBody: Data? = nil
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.status = status
        self.responseBody = responseBody
    }

    /// The transport failure behind this error, if it came from the transport.
    public var transportError: TransportError? { underlying as? TransportError }

    /// For a request the host's traffic policy held back (``Code/hostPaused``,
    /// ``Code/rateLimited``, ``Code/circuitOpen``): the earliest date it could be sent, when known.
    /// For a response whose `Retry-After` the call did not wait for (see
    /// ``Response/notBefore``): the date the server named.
    public var notBefore: Date? { serverNotBefore ?? transportError?.notBefore }

    /// The date of a server's `Retry-After` the call did not wait for.
    package var serverNotBefore: Date?

    /// Retries made before the call failed with this error (0: it failed at its first attempt),
    /// so that the description says a `503` came after three retries, not at once.
    package var retriesBefore = 0
    /// How long the request ran, from its first attempt to this error, when it was retried.
    package var retriedFor: Duration?

    /// Compares codes only.
    public static func == (lhs: BrickError, rhs: BrickError) -> Bool { lhs.code == rhs.code }

    /// `BrickError.\(code): message`, the status when there is one, and the underlying error.
    public var description: String {
        var text = "BrickError.\(code): \(message)"
        if let status { text += " (status \(status.code))" }
        if retriesBefore > 0 {
            text += " after \(retriesBefore) \(retriesBefore == 1 ? "retry" : "retries")"
            if let retriedFor { text += " over \(Self.spoken(retriedFor))" }
        }
        if let transport = underlying as? TransportError, transport.message == message {
            // The same sentence twice says nothing: only what the transport error adds.
            text += transport.details
        } else if let underlying {
            text += " [\(underlying)]"
        }
        return text
    }

    /// `15 s`, `2.5 s`, `0.3 s`: tenths below 10 s, whole seconds above.
    static func spoken(_ duration: Duration) -> String {
        let seconds = max(0, duration.seconds)
        return seconds < 10 ? "\((seconds * 10).rounded() / 10) s" : "\(Int(seconds.rounded())) s"
    }

    /// Cancelled by the caller.
    public static let cancelled = BrickError(.cancelled, message: "the request was cancelled")
    /// A timeout expired.
    public static let timedOut = BrickError(.timedOut, message: "the request timed out")
    /// The network is down.
    public static let notConnected = BrickError(.notConnected, message: "the network is not reachable")

    /// Wraps a transport failure, choosing the code from its kind.
    ///
    /// - Parameter error: The transport failure.
    /// - Returns: The equivalent `BrickError`.
    public static func transport(_ error: TransportError) -> BrickError {
        let code: Code
        switch error.kind {
        case .invalidRequest: code = .invalidRequest
        case .notConnected: code = .notConnected
        case .cannotConnect, .cannotResolveHost, .cannotResolveProxy: code = .cannotConnect
        case .connectionReset: code = .connectionLost
        case .timedOut: code = .timedOut
        case .tls: code = .tls
        case .invalidResponse, .bodyTooLarge, .tooManyRedirects, .redirectRefused: code = .invalidResponse
        case .cancelled: code = .cancelled
        case .hostPaused: code = .hostPaused
        case .rateLimited: code = .rateLimited
        case .circuitOpen: code = .circuitOpen
        case .egressRefused: code = .egressRefused
        default: code = .transport
        }
        return BrickError(code, message: error.message, underlying: error)
    }
}
