internal import CCurl
import FoundationEssentials
import Glibc

/// Turns a libcurl result into a ``TransportError``, keeping the code, `errno` and whether the
/// request was (partly) sent.
///
/// | CURLcode | kind | why |
/// |---|---|---|
/// | 6 COULDNT_RESOLVE_HOST | cannotResolveHost | DNS gave no address |
/// | 5 COULDNT_RESOLVE_PROXY | cannotResolveProxy | proxy name did not resolve |
/// | 7 COULDNT_CONNECT, errno ENETUNREACH/EHOSTUNREACH/ENETDOWN | notConnected | no route: the network is down |
/// | 7 COULDNT_CONNECT, no socket: EMFILE/ENFILE/ENOBUFS/ENOMEM | outOfResources | the process ran out of descriptors |
/// | 7 COULDNT_CONNECT, other errno | cannotConnect | refused or no listener; nothing was sent |
/// | 28 OPERATION_TIMEDOUT | timedOut | connect or whole-request limit (the idle timeout is the driver's own) |
/// | 35, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91 | tls | handshake, certificate, pin |
/// | 18 PARTIAL_FILE, 52 GOT_NOTHING, 55 SEND_ERROR, 56 RECV_ERROR | connectionReset | connection lost mid-exchange |
/// | 56 RECV_ERROR "… in chunked-encoding", "Too large response headers" | invalidResponse | bad framing from the server |
/// | 27 OUT_OF_MEMORY before the response header was complete | invalidResponse | a header line over libcurl's 100 KiB |
/// | 1 UNSUPPORTED_PROTOCOL, 8 WEIRD_SERVER_REPLY, 61 BAD_CONTENT_ENCODING, 16 HTTP2, 92 HTTP2_STREAM | invalidResponse | server broke the protocol |
/// | 63 FILESIZE_EXCEEDED | bodyTooLarge | Content-Length above the limit |
/// | 3 URL_MALFORMAT | invalidRequest | libcurl refused the URL |
/// | 26 READ_ERROR | fileIO | request body could not be read |
/// | 42 ABORTED_BY_CALLBACK | cancelled | aborted by progress callback |
/// | 47 TOO_MANY_REDIRECTS | tooManyRedirects | (only if libcurl followed) |
/// | 23 WRITE_ERROR | set by our callback: bodyTooLarge, invalidResponse, fileIO, or cancelled (a body stream stopped) | |
/// | anything else | other | |
enum CurlErrorMapping {
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
        if code == CURLE_COULDNT_CONNECT, transfer.socketErrno != 0 {
            let reason = String(cString: strerror(transfer.socketErrno))
            return TransportError(
                .outOfResources,
                message: "cannot open a socket: \(reason)"
                    + (transfer.socketErrno == EMFILE
                        ? " (the process's limit of open files, ulimit -n, is used up)" : ""),
                curlCode: Int(code.rawValue),
                osErrno: transfer.socketErrno,
                requestBytesSent: false
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
            kind(code: Int(code.rawValue), osErrno: osErrno),
            message: message,
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
            return nil
        case CURLE_OUT_OF_MEMORY where transfer.headerState != .complete && transfer.easy?.sentRequestBytes == true:
            // libcurl refuses a header line longer than CURL_MAX_HTTP_HEADER (100 KiB) this way.
            return "the server sent a response header line longer than libcurl accepts (100 KiB)"
        default:
            return nil
        }
    }

    static func kind(code: Int, osErrno: Int32) -> TransportError.Kind {
        switch code {
        case 6: return .cannotResolveHost
        case 5: return .cannotResolveProxy
        case 7:
            switch osErrno {
            case ENETUNREACH, EHOSTUNREACH, ENETDOWN: return .notConnected
            default: return .cannotConnect
            }
        case 28: return .timedOut
        case 35, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91: return .tls
        case 18, 52, 55, 56: return .connectionReset
        case 1, 8, 16, 61, 92: return .invalidResponse
        case 63: return .bodyTooLarge
        case 3: return .invalidRequest
        case 26: return .fileIO
        case 42: return .cancelled
        case 47: return .tooManyRedirects
        default: return .other
        }
    }
}

/// Process-wide libcurl setup, done once before the first handle exists.
enum CurlGlobal {
    private static let once: Void = {
        ccurl_openssl_no_atexit()
        ccurl_ignore_sigpipe()
        ccurl_global_init()
    }()

    /// The default `User-Agent`: `BrickRequest/VERSION libcurl/VERSION`.
    static let userAgent =
        "BrickRequest/\(BrickRequestVersion.string) libcurl/\(String(cString: ccurl_version_string()))"

    /// The content codings this libcurl can decode, for `Accept-Encoding`.
    static let supportedEncodings: String = {
        let features = ccurl_version_features()
        var encodings = ["gzip", "deflate"]
        if features & Int(CURL_VERSION_BROTLI) != 0 { encodings.append("br") }
        if features & Int(CURL_VERSION_ZSTD) != 0 { encodings.append("zstd") }
        return encodings.joined(separator: ", ")
    }()

    static func initialize() {
        _ = once
    }
}
