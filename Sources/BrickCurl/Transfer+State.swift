import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

extension Transfer {
    /// The file a `.file` destination's body is written to until it is complete, and what a
    /// continued download starts from.
    struct BodyFile: ~Copyable {
        var descriptor = FileDescriptor()
        /// The partial file's path.
        var partialPath: String?
        /// The bytes already in the partial file that this transfer continues from (0: a new body).
        var resumeOffset: Int64 = 0
        /// The `ETag` or `Last-Modified` of the response whose bytes the partial file holds, when
        /// that body could be continued by a later request; `nil` otherwise.
        var resumeValidator: String?
    }

    /// What the socket callbacks and the check before sending found about the connection.
    struct ConnectionState {
        /// `errno` of the last socket that could not be opened for this transfer (0: none).
        var socketErrno: Int32 = 0
        /// Set by the check before sending: the reused connection had bytes nobody asked for, so
        /// the request starts again on a new connection (see ``ConnectionRegistry``).
        var restartsOnNewConnection = false
        /// The next hop must open a new connection.
        var requiresNewConnection = false
        /// Whether this transfer may ride an HTTP/2 connection (TLS, and the transport offers h2).
        var mayMultiplex = false
        /// The egress policy each address this hop connects to is checked against; `nil` when
        /// none is (unrestricted, or a trusted proxy enforces it).
        var egress: EgressPolicy?
    }

    /// Flow control of a stream destination (see ``ResponseBodyStream/Demand/pause``).
    struct FlowControl {
        /// The stream asked for no more bytes until it resumes delivery.
        var streamPaused = false
        /// libcurl holds the receiving side paused (the write callback answered `CURL_WRITEFUNC_PAUSE`).
        var receivePaused = false
    }

    /// The request body being sent: which segment, where in it, and the open file of a file segment.
    struct Upload: ~Copyable {
        var segmentIndex = 0
        var segmentOffset = 0
        var file = FileDescriptor()
        /// The body's length, as libcurl was told.
        var length: Int64 = 0
        /// Bytes handed to libcurl so far.
        var sent: Int64 = 0
        /// The pipe of the stream segment being read (``RequestBodySource``), if any.
        var pipe: RequestBodyPipe?
        /// libcurl holds the sending side paused (the read callback answered `CURL_READFUNC_PAUSE`).
        var paused = false

        /// Back to the first byte (a new hop, or libcurl rewinding).
        mutating func rewind() {
            segmentIndex = 0
            segmentOffset = 0
            sent = 0
            file.close()
            pipe?.close()
            pipe = nil
            paused = false
        }
    }

    /// Bytes moved, for the idle timeout (see `CurlDriver.failIdleTransfers()`).
    struct Idleness {
        /// Bytes moved so far in either direction, headers included; never reset.
        var activity: Int64 = 0
        /// ``activity`` at the last idle check.
        var seen: Int64 = 0
        /// Since when ``activity`` has not changed (0: not yet seen).
        var quietSince: UInt64 = 0
    }

    /// The redirect chain.
    struct Redirects {
        /// Redirects followed so far.
        var count = 0
        /// Whether an earlier hop dropped the credentials (they stay dropped).
        var strippedCredentials = false
    }
}
