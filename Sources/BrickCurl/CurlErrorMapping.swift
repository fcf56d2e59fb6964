internal import CCurl
import FoundationEssentials
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Turns a libcurl result into a ``TransportError``, keeping the code, `errno` and whether the
/// request was (partly) sent. The table is ``kind(code:osErrno:)``, by `CURLE_*` name; before it,
/// an error a callback of ours set (``Transfer/abortError``: body too large, a bad response, a
/// file error, a stream that stopped) explains libcurl's generic `CURLE_WRITE_ERROR` or
/// `CURLE_ABORTED_BY_CALLBACK`, a socket that could not be opened (EMFILE, ENOBUFS, …) is
/// ``TransportError/Kind/outOfResources``, and the protocol violations libcurl reports as a lost
/// connection or a local failure (``protocolViolation(code:message:transfer:osErrno:)``) are
/// ``TransportError/Kind/invalidResponse``.
package enum CurlErrorMapping {
    /// What a TLS failure was, in words a reader acts on, before OpenSSL's own text; `nil` for
    /// a code that is not a TLS failure of the handshake or the certificate.
    ///
    /// - Parameters:
    ///   - code: libcurl's code (35 the handshake, 60 the certificate's verification).
    ///   - message: libcurl's message (OpenSSL's reason).
    package static func tlsDescription(code: Int, message: String) -> String? {
        let lowered = message.lowercased()
        switch code {
        case 35:  // CURLE_SSL_CONNECT_ERROR
            if lowered.contains("protocol version") || lowered.contains("unsupported protocol")
                || lowered.contains("no protocols available")
            {
                return "TLS handshake failed: the server offers no TLS version this client accepts "
                    + "(TLS 1.2 or later): \(message)"
            }
            if lowered.contains("wrong version number") {
                return "TLS handshake failed: the server did not answer in TLS (plain HTTP on an https URL?): \(message)"
            }
            if lowered.contains("ssl_error_syscall") || lowered.contains("unexpected eof")
                || lowered.contains("connection reset")
            {
                return "TLS handshake failed: the server closed the connection during the handshake: \(message)"
            }
            return "TLS handshake failed: \(message)"
        case 60:  // CURLE_PEER_FAILED_VERIFICATION
            return "the server's certificate was refused: \(message)"
        default:
            return nil
        }
    }

    /// Which limit a libcurl timeout (code 28) was, named as the configuration names it, before
    /// libcurl's text; `nil` for another code. (The idle timeout is the driver's own and says so.)
    ///
    /// - Parameters:
    ///   - code: libcurl's code.
    ///   - message: libcurl's message.
    ///   - connected: Whether the connection was established before the limit expired.
    package static func timeoutDescription(code: Int, message: String, connected: Bool) -> String? {
        guard code == 28 else { return nil }  // CURLE_OPERATION_TIMEDOUT
        let lowered = message.lowercased()
        if lowered.hasPrefix("resolving timed out") {
            return "connect timeout: the host name was not resolved in time: \(message)"
        }
        // libcurl's own words first ("Operation timed out" is the whole-request limit, even for a
        // request still waiting for a connection); otherwise whether a connection was made.
        if lowered.hasPrefix("operation timed out") || (connected && !lowered.hasPrefix("connection timed out")) {
            return "request timeout: the whole request took longer than its limit: \(message)"
        }
        return "connect timeout: no connection was established in time: \(message)"
    }

    static func error(code: CURLcode, easy: EasyHandle, transfer: Transfer) -> TransportError {
        let sent = easy.sentRequestBytes
        if let abort = transfer.abortError {
            return TransportError(
                abort.kind,
                message: abort.message,
                curlCode: Int(code.rawValue),
                osErrno: abort.osErrno,
                requestBytesSent: sent || abort.requestBytesSent
            )
        }
        let osErrno = Int32(easy.long(CURLINFO_OS_ERRNO))
        var message = easy.errorMessage
        if message.isEmpty { message = String(cString: curl_easy_strerror(code)) }
        if code == CURLE_COULDNT_CONNECT, transfer.connection.socketErrno != 0 {
            let reason = String(cString: strerror(transfer.connection.socketErrno))
            return TransportError(
                .outOfResources,
                message: "cannot open a socket: \(reason)"
                    + (transfer.connection.socketErrno == EMFILE
                        ? " (the process's limit of open files, ulimit -n, is used up)" : ""),
                curlCode: Int(code.rawValue),
                osErrno: transfer.connection.socketErrno,
                requestBytesSent: false
            )
        }
        if code == CURLE_HTTP2_STREAM {
            let (kind, processed) = http2StreamReset(message: message)
            return TransportError(
                kind,
                message: message,
                curlCode: Int(code.rawValue),
                requestBytesSent: sent && processed
            )
        }
        if let refused = retriesExhausted(message: message, freshConnection: easy.requiresFreshConnection) {
            return TransportError(
                .connectionReset,
                message: refused.message,
                curlCode: Int(code.rawValue),
                requestBytesSent: sent && refused.processed
            )
        }
        if let violation = protocolViolation(code: code, message: message, transfer: transfer, osErrno: osErrno) {
            return TransportError(
                .invalidResponse,
                message: violation,
                curlCode: Int(code.rawValue),
                requestBytesSent: sent
            )
        }
        return TransportError(
            kind(code: code, osErrno: osErrno),
            message: tlsDescription(code: Int(code.rawValue), message: message)
                ?? timeoutDescription(
                    code: Int(code.rawValue),
                    message: message,
                    connected: easy.offset(CURLINFO_CONNECT_TIME_T) > 0
                ) ?? message,
            curlCode: Int(code.rawValue),
            osErrno: osErrno == 0 ? nil : osErrno,
            requestBytesSent: sent
        )
    }

    /// What the server did wrong, when libcurl reports a protocol violation with a result code
    /// that otherwise means a lost connection or a local failure; `nil` for anything else.
    static func protocolViolation(code: CURLcode, message: String, transfer: Transfer, osErrno: Int32) -> String? {
        switch code {
        case CURLE_RECV_ERROR where osErrno == 0:
            if message.contains("chunked-encoding") {
                return "the server sent a malformed chunked body (\(message))"
            }
            if message.contains("Too large response headers") {
                return "the server sent a response header block larger than libcurl accepts (\(message))"
            }
            if message.contains("nghttp2_session_mem_recv() returned -9") {
                // nghttp2 refused what the server sent: libcurl's limit on an HTTP/2 header list
                // (-902, its callback failed: 128 KiB), a CONTINUATION flood (-905), a flood of
                // frames that each need an answer (-904), a frame that breaks the protocol.
                return "the server broke HTTP/2 (\(message))"
            }
            return nil
        case CURLE_OUT_OF_MEMORY where transfer.header.state != .complete && transfer.easy?.sentRequestBytes == true:
            // libcurl refuses a header line longer than CURL_MAX_HTTP_HEADER (100 KiB) this way.
            return "the server sent a response header line longer than libcurl accepts (100 KiB)"
        default:
            return nil
        }
    }

    /// What a stream reset (`CURLE_HTTP2_STREAM`) was, by the RFC 9113 error code libcurl names in
    /// its message ("HTTP/2 stream 1 was not closed cleanly: INTERNAL_ERROR (err 2)"): whether to
    /// treat it as a lost exchange or as a server breaking the protocol, and whether the server may
    /// have processed the request.
    ///
    /// | code | kind | processed |
    /// |---|---|---|
    /// | `REFUSED_STREAM` | connectionReset | no: the server promises it did nothing (RFC 9113 §8.7), so any method may go again |
    /// | `NO_ERROR`, `INTERNAL_ERROR`, `CANCEL`, `STREAM_CLOSED`, `CONNECT_ERROR`, `ENHANCE_YOUR_CALM`, an unnamed code | connectionReset | maybe |
    /// | `PROTOCOL_ERROR`, `FLOW_CONTROL_ERROR`, `FRAME_SIZE_ERROR`, `COMPRESSION_ERROR`, `SETTINGS_TIMEOUT`, `INADEQUATE_SECURITY`, `HTTP_1_1_REQUIRED` | invalidResponse | maybe |
    ///
    /// - Parameter message: libcurl's message for the failure.
    /// - Returns: The kind, and whether the request may have been processed.
    package static func http2StreamReset(message: String) -> (kind: TransportError.Kind, processed: Bool) {
        if message.contains("REFUSED_STREAM") { return (.connectionReset, false) }
        for code in [
            "PROTOCOL_ERROR", "FLOW_CONTROL_ERROR", "FRAME_SIZE_ERROR", "COMPRESSION_ERROR", "SETTINGS_TIMEOUT",
            "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ] where message.contains(code) {
            return (.invalidResponse, true)
        }
        return (.connectionReset, true)
    }

    /// What libcurl's "Connection died, tried 5 times before giving up" was; `nil` for any other
    /// message.
    ///
    /// libcurl sends a request again itself, on a fresh connection, when the stream it went on
    /// was refused (`REFUSED_STREAM`, RFC 9113 §8.7: the server did nothing with it) or when a
    /// connection it reused turned out closed before any byte of the response — five times, then
    /// gives up with that message. A transfer that opened a connection of its own each time
    /// (`CURLOPT_FRESH_CONNECT`: what a request that is not safe to repeat always does here)
    /// never reused one, so each of its tries was refused and the server processed none of them:
    /// any method may go again. For a transfer that may ride a reused connection, either can have
    /// happened. (A burst of streams on a new connection to a server announcing a low
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` ends this way when libcurl sends them before it has read
    /// the limit, again and again.)
    ///
    /// - Parameters:
    ///   - message: libcurl's message for the failure.
    ///   - freshConnection: Whether the transfer opened a connection of its own for every try.
    /// - Returns: The message to report, and whether the request may have been processed.
    package static func retriesExhausted(message: String, freshConnection: Bool) -> (message: String, processed: Bool)? {
        guard message.hasPrefix("Connection died, tried") else { return nil }
        if freshConnection {
            return (
                "the server refused the request's stream (REFUSED_STREAM) on every try; it processed none of them: "
                    + message,
                false
            )
        }
        return (
            "the connection died, or the server refused the request's stream (REFUSED_STREAM), before any "
                + "response on every try: \(message)",
            true
        )
    }

    /// The kind of a libcurl result: the table, by name.
    static func kind(code: CURLcode, osErrno: Int32) -> TransportError.Kind {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST:
            return .cannotResolveHost  // DNS gave no address: usually no network
        case CURLE_COULDNT_RESOLVE_PROXY:
            return .cannotResolveProxy
        case CURLE_COULDNT_CONNECT:
            switch osErrno {
            case ENETUNREACH, EHOSTUNREACH, ENETDOWN: return .notConnected  // no route
            default: return .cannotConnect  // refused, no listener: nothing was sent
            }
        case CURLE_OPERATION_TIMEDOUT:
            return .timedOut  // connect or whole-request limit (the idle timeout is the driver's own)
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_CERTPROBLEM,
            CURLE_SSL_CIPHER, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_ENGINE_INITFAILED, CURLE_USE_SSL_FAILED,
            CURLE_SSL_CACERT_BADFILE, CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR,
            CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            return .tls  // handshake, certificate, pin
        case CURLE_PARTIAL_FILE, CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR:
            return .connectionReset  // the connection was lost mid-exchange
        case CURLE_HTTP2:
            // libcurl 7.88 ends this way a stream its connection's GOAWAY left unprocessed (last
            // stream id below it) when it does not retry it itself; the framing layer failing
            // otherwise is a lost connection too. Retried when safe, like a reset.
            return .connectionReset
        case CURLE_HTTP2_STREAM:
            return http2StreamReset(message: "").kind  // by the reset's code: see `http2StreamReset`
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_WEIRD_SERVER_REPLY, CURLE_BAD_CONTENT_ENCODING:
            return .invalidResponse  // the server broke the protocol
        case CURLE_FILESIZE_EXCEEDED:
            return .bodyTooLarge  // Content-Length above the limit
        case CURLE_URL_MALFORMAT:
            return .invalidRequest
        case CURLE_READ_ERROR:
            return .fileIO  // the request body could not be read
        case CURLE_ABORTED_BY_CALLBACK:
            return .cancelled
        case CURLE_TOO_MANY_REDIRECTS:
            return .tooManyRedirects  // only if libcurl followed them itself
        default:
            return .other
        }
    }
}
