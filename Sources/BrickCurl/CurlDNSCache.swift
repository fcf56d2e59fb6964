/// libcurl's DNS cache as the driver sees it: the key a URL's name has there, so that a name
/// whose address stopped answering can be dropped from it (``CurlDriver`` does, after a failed
/// connection).
package enum CurlDNSCache {
    /// `host:port` of a URL whose host is a name (the key of libcurl's DNS cache); `nil` for an
    /// address literal or a URL that cannot be read.
    package static func name(of url: String) -> String? {
        guard let schemeEnd = url.firstRange(of: "://") else { return nil }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        var authority = url[schemeEnd.upperBound...]
        if let end = authority.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { authority = authority[..<end] }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("[") { return nil }  // an IPv6 literal
        var host = Substring(authority)
        var port = scheme == "https" ? "443" : "80"
        if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            port = String(authority[authority.index(after: colon)...])
        }
        guard !host.isEmpty, !host.allSatisfy({ $0.isNumber || $0 == "." }) else { return nil }
        return host.lowercased() + ":" + port
    }
}
