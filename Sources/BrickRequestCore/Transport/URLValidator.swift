/// Parses and checks request URLs before any I/O, in one pass over the UTF-8 bytes.
///
/// Only absolute `http`/`https` URLs are accepted. Spaces, control characters, non-ASCII bytes,
/// user information (`user:password@`) and percent-encoded bytes in the host are refused: each is a
/// way to make the client and a server disagree about where a request goes.
package enum URLValidator {
    /// Where the parts of a URL are, as UTF-8 offsets into the string that was parsed: no part is
    /// copied into a string of its own until asked for.
    package struct Parts {
        var isHTTPS: Bool
        /// The authority (host and port).
        var authority: Range<Int>
        /// The path and query, without the fragment; empty or starting with `?` when the URL has no
        /// path (``pathAndQuery(in:)`` then puts a `/` in front).
        var path: Range<Int>
        /// Whether the input is already `scheme://authority` + path and query byte for byte
        /// (lowercase scheme, no fragment, a path present), so it can be used as is.
        var isCanonical: Bool

        /// `http` or `https`.
        package var scheme: String { isHTTPS ? "https" : "http" }
        /// The authority, from the string that was parsed.
        package func authority(in url: String) -> String { URLValidator.slice(url, authority) }

        /// The path and query (with a leading `/`), from the string that was parsed.
        package func pathAndQuery(in url: String) -> String {
            let path = URLValidator.slice(url, self.path)
            return path.hasPrefix("/") ? path : "/" + path
        }

        /// The canonical URL string (`url` itself when it already is one) and the UTF-8 offset where
        /// its authority ends and its path begins.
        func canonical(_ url: String) -> (url: String, authorityEnd: Int) {
            if isCanonical { return (url, authority.upperBound) }
            let authority = self.authority(in: url)
            var canonical = String()
            canonical.reserveCapacity(scheme.utf8.count + 4 + authority.utf8.count + path.count)
            canonical += scheme
            canonical += "://"
            canonical += authority
            let authorityEnd = canonical.utf8.count
            canonical += pathAndQuery(in: url)
            return (canonical, authorityEnd)
        }
    }

    /// The bytes at UTF-8 offsets `range` of `text`, as a string.
    static func slice(_ text: String, _ range: Range<Int>) -> String {
        let utf8 = text.utf8
        let start = utf8.index(utf8.startIndex, offsetBy: range.lowerBound)
        let end = utf8.index(start, offsetBy: range.count)
        return String(Substring(utf8[start..<end]))
    }

    package static func parse(_ url: String) throws(TransportError) -> Parts {
        var url = url
        let result = url.withUTF8 { parse(bytes: $0) }
        return try result.get()
    }

    /// Whether `position` lies between a `scheme://` and the end of the authority.
    private static func isInAuthority(_ bytes: UnsafeBufferPointer<UInt8>, _ position: Int) -> Bool {
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon + 3 <= position,
            bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/")
        else { return false }
        return !bytes[(colon + 3)..<position].contains {
            $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
        }
    }

    private static func invalid(_ reason: String) -> Result<Parts, TransportError> {
        .failure(TransportError(.invalidRequest, message: "invalid URL: \(reason)"))
    }

    private static func parse(bytes: UnsafeBufferPointer<UInt8>) -> Result<Parts, TransportError> {
        let count = bytes.count
        let fragment: Int
        switch scan(bytes) {
        case .success(let start): fragment = start
        case .failure(let error):
            // A non-ASCII host cannot be percent-encoded (that is refused below): say what works.
            if let wide = bytes.firstIndex(where: { $0 >= 0x80 }), isInAuthority(bytes, wide) {
                return invalid("the host contains non-ASCII characters; write it in its ASCII form (punycode, xn--…)")
            }
            return .failure(error)
        }
        let colon: Int
        if count > 4 && bytes[4] == UInt8(ascii: ":") && matches(bytes, at: 0, "http") {
            colon = 4
        } else if count > 5 && bytes[5] == UInt8(ascii: ":") && matches(bytes, at: 0, "https") {
            colon = 5
        } else {
            guard let found = bytes.firstIndex(of: UInt8(ascii: ":")), found > 0 else { return invalid("no scheme") }
            let name = String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<found]), as: UTF8.self)
            return invalid("scheme \(name.lowercased().debugDescription) is not http or https")
        }
        let authorityStart = colon + 3
        guard authorityStart <= count, bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/")
        else {
            return invalid("not an absolute URL")
        }
        var authorityEnd = authorityStart
        var lastColon = -1
        var closeBracket = -1
        while authorityEnd < count {
            switch bytes[authorityEnd] {
            case UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"):
                break
            case UInt8(ascii: "@"):
                return invalid("credentials in the URL are refused; send them in a header")
            case UInt8(ascii: "%"):
                return invalid("percent-encoding in the host is refused")
            case UInt8(ascii: "\\"):
                return invalid("backslash in the host")
            case UInt8(ascii: ":"):
                lastColon = authorityEnd
                authorityEnd += 1
                continue
            case UInt8(ascii: "]"):
                closeBracket = authorityEnd
                authorityEnd += 1
                continue
            default:
                authorityEnd += 1
                continue
            }
            break
        }
        var hostEnd = authorityEnd
        if authorityStart < authorityEnd && bytes[authorityStart] == UInt8(ascii: "[") {
            guard closeBracket > authorityStart else { return invalid("unterminated IPv6 address") }
            hostEnd = closeBracket + 1
            if hostEnd < authorityEnd {
                guard bytes[hostEnd] == UInt8(ascii: ":") else {
                    return invalid("unexpected characters after the host")
                }
                if let error = checkPort(bytes, from: hostEnd + 1, to: authorityEnd) { return .failure(error) }
            }
        } else if lastColon >= 0 {
            hostEnd = lastColon
            if bytes[authorityStart..<lastColon].contains(UInt8(ascii: ":")) {
                return invalid("more than one port (or an IPv6 address without brackets)")
            }
            if let error = checkPort(bytes, from: lastColon + 1, to: authorityEnd) { return .failure(error) }
        }
        if hostEnd == authorityStart { return invalid("no host") }
        let end = fragment  // fragments are never sent
        let hasPath = authorityEnd < end && bytes[authorityEnd] == UInt8(ascii: "/")
        let isCanonical =
            hasPath && end == count && bytes[0] == UInt8(ascii: "h") && bytes[colon - 1] != UInt8(ascii: "S")
            && bytes[1] == UInt8(ascii: "t") && bytes[2] == UInt8(ascii: "t") && bytes[3] == UInt8(ascii: "p")
        return .success(
            Parts(
                isHTTPS: colon == 5,
                authority: authorityStart..<authorityEnd,
                path: authorityEnd..<end,
                isCanonical: isCanonical
            )
        )
    }

    /// Checks that every byte is printable ASCII (0x21...0x7E) and returns where the fragment starts
    /// (`bytes.count` when there is none): eight bytes at a time, each word with three bit tests,
    /// byte by byte only in a word that holds a `#` to find or a byte to refuse.
    private static func scan(_ bytes: UnsafeBufferPointer<UInt8>) -> Result<Int, TransportError> {
        let count = bytes.count
        guard let base = bytes.baseAddress else { return .success(0) }
        var fragment = count
        var index = 0
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        /// The bytes of `word` that are zero have their high bit set; others (below the first
        /// zero byte) are clear — exact as an "any zero byte" test.
        func zeroBytes(_ word: UInt64) -> UInt64 { (word &- ones) & ~word & highs }
        while index + 8 <= count {
            let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
            // Any byte ≥ 0x80, any byte < 0x21 (exact once no byte is ≥ 0x80), any 0x7F.
            let refused = (word & highs) | ((word &- ones &* 0x21) & ~word & highs) | zeroBytes(word ^ (ones &* 0x7F))
            let hash = fragment == count ? zeroBytes(word ^ (ones &* 0x23)) : 0
            if refused | hash != 0 {
                for position in index..<(index + 8) {
                    if let error = check(bytes[position], at: position, fragment: &fragment) { return .failure(error) }
                }
            }
            index += 8
        }
        while index < count {
            if let error = check(bytes[index], at: index, fragment: &fragment) { return .failure(error) }
            index += 1
        }
        return .success(fragment)
    }

    /// One byte of ``scan(_:)``'s slow path.
    @inline(__always)
    private static func check(_ byte: UInt8, at position: Int, fragment: inout Int) -> TransportError? {
        if byte &- 0x21 >= 0x5E {
            let reason =
                byte >= 0x80
                ? "contains non-ASCII characters; percent-encode them" : "contains a space or control character"
            return TransportError(.invalidRequest, message: "invalid URL: \(reason)")
        }
        if byte == UInt8(ascii: "#") && position < fragment { fragment = position }
        return nil
    }

    /// Whether `bytes[offset...]` starts with `text`, ignoring ASCII case.
    private static func matches(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, _ text: StaticString) -> Bool {
        let length = text.utf8CodeUnitCount
        guard offset + length <= bytes.count else { return false }
        for index in 0..<length where bytes[offset + index] | 0x20 != text.utf8Start[index] {
            return false
        }
        return true
    }

    private static func checkPort(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int) -> TransportError?
    {
        var port = 0
        var digits = 0
        for index in start..<end {
            let byte = bytes[index]
            guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"), digits < 5 else {
                digits = 6
                break
            }
            port = port * 10 + Int(byte - UInt8(ascii: "0"))
            digits += 1
        }
        guard digits > 0 && digits <= 5 && port <= 65535 else {
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
            return TransportError(
                .invalidRequest,
                message: "invalid URL: port \(text.debugDescription) is not a number from 0 to 65535"
            )
        }
        return nil
    }
}
