internal import CCurl
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Process-wide libcurl setup, done once before the first handle exists.
enum CurlGlobal {
    private static let once: Void = {
        ccurl_openssl_no_atexit()
        ccurl_ignore_sigpipe()
        ccurl_global_init()
    }()

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
