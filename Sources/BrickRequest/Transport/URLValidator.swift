/// Parses and checks request URLs before any I/O.
///
/// Only absolute `http`/`https` URLs are accepted. Spaces, control characters, non-ASCII bytes,
/// user information (`user:password@`) and percent-encoded bytes in the host are refused: each is a
/// way to make the client and a server disagree about where a request goes.
enum URLValidator {
    struct Parts {
        var scheme: String
        var authority: String
        var host: Substring
        var pathAndQuery: String
    }

    static func parse(_ url: String) throws(TransportError) -> Parts {
        func invalid(_ reason: String) -> TransportError {
            TransportError(.invalidRequest, message: "invalid URL: \(reason)")
        }
        var utf8 = url.utf8[...]
        for byte in utf8 {
            if byte <= 0x20 || byte == 0x7F { throw invalid("contains a space or control character") }
            if byte >= 0x80 { throw invalid("contains non-ASCII characters; percent-encode them") }
        }
        guard let colon = utf8.firstIndex(of: UInt8(ascii: ":")) else { throw invalid("no scheme") }
        let scheme = String(Substring(utf8[..<colon])).lowercased()
        guard scheme == "http" || scheme == "https" else {
            throw invalid("scheme \(scheme.debugDescription) is not http or https")
        }
        utf8 = utf8[utf8.index(after: colon)...]
        guard utf8.starts(with: "//".utf8) else { throw invalid("not an absolute URL") }
        utf8 = utf8.dropFirst(2)
        let authorityEnd =
            utf8.firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") })
            ?? utf8.endIndex
        let authority = Substring(utf8[..<authorityEnd])
        if authority.contains("@") { throw invalid("credentials in the URL are refused; send them in a header") }
        if authority.contains("%") { throw invalid("percent-encoding in the host is refused") }
        if authority.contains("\\") { throw invalid("backslash in the host") }
        var host = authority
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw invalid("unterminated IPv6 address") }
            host = authority[...close]
            let rest = authority[authority.index(after: close)...]
            if !rest.isEmpty { try checkPort(rest, invalid) }
        } else if let portColon = authority.lastIndex(of: ":") {
            host = authority[..<portColon]
            try checkPort(authority[portColon...], invalid)
        }
        if host.isEmpty { throw invalid("no host") }
        var rest = Substring(utf8[authorityEnd...])
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }  // fragments are never sent
        var pathAndQuery = String(rest)
        if pathAndQuery.isEmpty || pathAndQuery.hasPrefix("?") { pathAndQuery = "/" + pathAndQuery }
        return Parts(scheme: scheme, authority: String(authority), host: host, pathAndQuery: pathAndQuery)
    }

    private static func checkPort(
        _ text: Substring, _ invalid: (String) -> TransportError
    ) throws(TransportError) {
        guard text.first == ":" else { throw invalid("unexpected characters after the host") }
        let digits = text.dropFirst()
        guard !digits.isEmpty, digits.allSatisfy(\.isASCIIDigit), let port = Int(digits), port <= 65535 else {
            throw invalid("port \(String(digits).debugDescription) is not a number from 0 to 65535")
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
