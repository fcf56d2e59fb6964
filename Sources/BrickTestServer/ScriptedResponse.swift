/// What the server does for one request: a normal response, or a fault.
///
/// Scripts are queued per path with ``BrickTestServer/script(_:_:)``; each request to that path
/// takes the next step, and once the script is used up the path's normal route answers again.
public enum ScriptedResponse: Sendable, Hashable {
    /// A complete response with a `Content-Length`.
    case respond(status: Int, headers: [HeaderPair] = [], body: [UInt8] = [])
    /// Read the request, then reset the connection (TCP RST) without sending anything.
    case resetBeforeResponse
    /// Read the request, then close the connection (FIN) without sending anything.
    case closeBeforeResponse
    /// Send the head and `sentBytes` of a `totalBytes` body, then reset the connection.
    case resetMidBody(totalBytes: Int, sentBytes: Int)
    /// Answer as the path's route would, with its real head (`Content-Length` of the whole body)
    /// and bytes, but reset the connection after `bodyBytes` bytes of the body: a transfer cut off
    /// by the network. (A route that does not answer with a complete body, such as `/stream`, is
    /// reset before the response.)
    case routeCutAfter(bodyBytes: Int)
    /// Never answer; the connection stays open until the client gives up.
    case stall
    /// Send a `totalBytes` body one byte at a time, one byte every `interval`.
    case slowDrip(totalBytes: Int, interval: Duration)
    /// Send the head and the first `sentBytes` of a `totalBytes` body (`*` bytes), then the rest
    /// once `gate` is open: a transfer the test holds in the middle for as long as it needs.
    case heldMidBody(totalBytes: Int, sentBytes: Int, until: ResponseGate)
    /// Write these exact bytes (a hand-made, possibly malformed response), then close.
    case raw([UInt8])
    /// Write these exact bytes and keep the connection open for the next request, as a server
    /// that sends more than it owes does: a body after a `204` or `304`, or after a `HEAD`
    /// response.
    case rawKeepingConnection([UInt8])
    /// Answer as `response` does, then, `delay` later, push `bytes` on the idle kept-alive
    /// connection (an unsolicited response, which a client must not take for the next answer).
    indirect case pushAfterResponse(ScriptedResponse, bytes: [UInt8], delay: Duration)
    /// Answer as `response` does once `gate` is open (the request is recorded when it arrives).
    indirect case held(ScriptedResponse, until: ResponseGate)

    /// A header name and value.
    public struct HeaderPair: Sendable, Hashable {
        /// The field name.
        public var name: String
        /// The field value.
        public var value: String

        /// Creates a header pair.
        ///
        /// - Parameters:
        ///   - name: The field name.
        ///   - value: The field value.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// A response with this status and an empty body.
    ///
    /// - Parameter code: The status code.
    /// - Returns: The scripted response.
    public static func status(_ code: Int) -> ScriptedResponse {
        .respond(status: code)
    }

    /// A response with this status and a `Retry-After` header (seconds or an HTTP date).
    ///
    /// - Parameters:
    ///   - code: The status code, typically 429 or 503.
    ///   - retryAfter: The header's value.
    /// - Returns: The scripted response.
    public static func status(_ code: Int, retryAfter: String) -> ScriptedResponse {
        .respond(status: code, headers: [HeaderPair("Retry-After", retryAfter)])
    }

    /// A 200 response with a UTF-8 body.
    ///
    /// - Parameters:
    ///   - text: The body.
    ///   - contentType: Its media type.
    /// - Returns: The scripted response.
    public static func ok(_ text: String, contentType: String = "text/plain; charset=utf-8") -> ScriptedResponse {
        .respond(status: 200, headers: [HeaderPair("Content-Type", contentType)], body: Array(text.utf8))
    }
}

/// A request as the server received it.
public struct RecordedRequest: Sendable, Hashable {
    /// The method, e.g. `POST`.
    public var method: String
    /// The request target: path and query.
    public var uri: String
    /// The path without the query.
    public var path: String
    /// The header fields in the order received.
    public var headers: [ScriptedResponse.HeaderPair]
    /// The body bytes.
    public var body: [UInt8]
    /// Which connection carried it (1 for the first connection the server accepted).
    public var connection: Int
    /// Its position on that connection (1 for the first request).
    public var indexOnConnection: Int
    /// When the server had read it whole.
    public var receivedAt: ContinuousClock.Instant = .now

    /// The first value of a header, compared case-insensitively.
    ///
    /// - Parameter name: The field name.
    /// - Returns: The value, or `nil`.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}
