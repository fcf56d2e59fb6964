import FoundationEssentials
import Glibc
import HTTPTypes

/// The values redacted in one exchange, to be hunted through the rest of it.
struct Secrets {
    private var values: Set<String> = []

    var isEmpty: Bool { values.isEmpty }

    /// The shortest value hunted through the exchange; shorter ones are replaced only where found.
    static let shortest = 6

    mutating func add(_ value: String) {
        let trimmed = Self.trimmed(value)
        guard trimmed.utf8.count >= Self.shortest, trimmed != HARRedaction.placeholder else { return }
        values.insert(trimmed)
    }

    /// A credential header's value, and the parts of it a body may echo: the credentials after
    /// an `Authorization` scheme (and a `Basic` pair's password), each cookie's value.
    mutating func addCredential(_ value: String, field: String) {
        add(value)
        switch field {
        case "cookie", "set-cookie":
            let pairs = field == "cookie" ? value.split(separator: ";") : Array(value.split(separator: ";").prefix(1))
            for pair in pairs {
                if let equals = pair.firstIndex(of: "=") { add(String(pair[pair.index(after: equals)...])) }
            }
        default:
            guard let space = value.firstIndex(of: " ") else { return }
            let credentials = Self.trimmed(String(value[value.index(after: space)...]))
            add(credentials)
            if value.lowercased().hasPrefix("basic "), let decoded = Data(base64Encoded: credentials) {
                let pair = String(decoding: decoded, as: UTF8.self)
                add(pair)
                if let colon = pair.firstIndex(of: ":") { add(String(pair[pair.index(after: colon)...])) }
            }
        }
    }

    /// Every form a value may take in a body, a header or a URL: as is, percent-encoded (both
    /// ways a space goes), JSON-escaped. Longest first, so a value inside another is replaced
    /// after it.
    var needles: [[UInt8]] {
        var forms: Set<[UInt8]> = []
        for value in values {
            let bytes = Array(value.utf8)
            forms.insert(bytes)
            let encoded = Self.percentEncoded(bytes, spaceAsPlus: false)
            forms.insert(encoded)
            forms.insert(Self.percentEncoded(bytes, spaceAsPlus: true))
            var escaped: [UInt8] = []
            for byte in bytes {
                if byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "/") { escaped.append(UInt8(ascii: "\\")) }
                escaped.append(byte)
            }
            forms.insert(escaped)
        }
        return forms.sorted { $0.count > $1.count }
    }

    /// `bytes` with everything but letters, digits and `-._~` percent-encoded (upper-case hex).
    static func percentEncoded(_ bytes: [UInt8], spaceAsPlus: Bool) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        var encoded: [UInt8] = []
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                encoded.append(byte)
            case UInt8(ascii: " ") where spaceAsPlus:
                encoded.append(UInt8(ascii: "+"))
            default:
                encoded += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]]
            }
        }
        return encoded
    }

    /// `text` without leading and trailing spaces and tabs.
    static func trimmed(_ text: String) -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let start = text.firstIndex(where: { !isSpace($0) }), let end = text.lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(text[start...end])
    }

    static func replace(_ needles: [[UInt8]], in text: String) -> String {
        String(decoding: replace(needles, in: Array(text.utf8)), as: UTF8.self)
    }

    static func replace(_ needles: [[UInt8]], in data: Data) -> Data {
        Data(replace(needles, in: Array(data)))
    }

    static func replace(_ needles: [[UInt8]], in fields: HTTPFields) -> HTTPFields {
        var replaced = HTTPFields()
        for field in fields { replaced.append(HTTPField(name: field.name, value: replace(needles, in: field.value))) }
        return replaced
    }

    /// Where `pattern` next occurs in `haystack` at or after `start` (`memchr` for its first
    /// byte, `memcmp` for the rest).
    static func find(_ pattern: UnsafeRawBufferPointer, in haystack: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = haystack.baseAddress, let needle = pattern.baseAddress, pattern.count > 0 else { return nil }
        let first = Int32(pattern[0])
        var offset = start
        while haystack.count - offset >= pattern.count {
            guard let hit = memchr(base + offset, first, haystack.count - offset - pattern.count + 1) else { return nil }
            let at = base.distance(to: UnsafeRawPointer(hit))
            if memcmp(hit, needle, pattern.count) == 0 { return at }
            offset = at + 1
        }
        return nil
    }

    /// `bytes` with every occurrence of each needle replaced by `REDACTED` (found with `memchr`:
    /// the flight recorder runs this on every attempt that carried a credential).
    static func replace(_ needles: [[UInt8]], in bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        let placeholder = Array(HARRedaction.placeholder.utf8)
        for needle in needles where !needle.isEmpty && needle.count <= bytes.count {
            var output: [UInt8] = []
            var found = false
            bytes.withUnsafeBytes { haystack in
                needle.withUnsafeBytes { pattern in
                    var offset = 0
                    while let hit = Self.find(pattern, in: haystack, from: offset) {
                        let at = hit
                        if !found {
                            output.reserveCapacity(haystack.count)
                            found = true
                        }
                        output.append(contentsOf: haystack[offset..<at])
                        output.append(contentsOf: placeholder)
                        offset = at + pattern.count
                    }
                    if found { output.append(contentsOf: haystack[offset...]) }
                }
            }
            if found { bytes = output }
        }
        return bytes
    }
}

/// `name=value&…` (a query, a form body): values of the named fields replaced.
enum FormFields {
    static func redact(_ text: String, names: Set<String>, collecting secrets: inout Secrets) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = decoded(parts[0]).lowercased()
            guard names.contains(name), parts.count > 1 else { return String(pair) }
            secrets.add(String(parts[1]))
            secrets.add(decoded(parts[1]))
            return "\(parts[0])=\(HARRedaction.placeholder)"
        }.joined(separator: "&")
    }

    /// `text` form-decoded: `+` is a space, `%XX` a byte (a malformed escape is kept as it is).
    static func decoded(_ text: Substring) -> String {
        let bytes = Array(text.utf8)
        var decoded: [UInt8] = []
        var index = 0
        func hexValue(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) {
                decoded.append(high << 4 | low)
                index += 3
            } else {
                decoded.append(bytes[index] == UInt8(ascii: "+") ? UInt8(ascii: " ") : bytes[index])
                index += 1
            }
        }
        return String(decoding: decoded, as: UTF8.self)
    }
}

/// A JSON text — whole or cut short — scanned for `"name": value` pairs whose name is redacted;
/// the value (a string or a number) becomes `"REDACTED"`. Everything else is kept byte for byte.
enum JSONFields {
    static func redact(_ body: Data, names: Set<String>, collecting secrets: inout Secrets) -> Data {
        let bytes = Array(body)
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        var changed = false
        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: "\""), let end = stringEnd(bytes, from: index) else {
                output.append(bytes[index])
                index += 1
                continue
            }
            output.append(contentsOf: bytes[index...end])
            var next = skipSpace(bytes, from: end + 1)
            guard next < bytes.count, bytes[next] == UInt8(ascii: ":") else {
                index = end + 1
                continue
            }
            let key = unescaped(bytes[(index + 1)..<end]).lowercased()
            guard names.contains(key) else {
                index = end + 1
                continue
            }
            next = skipSpace(bytes, from: next + 1)
            let valueEnd: Int?
            if next < bytes.count, bytes[next] == UInt8(ascii: "\"") {
                valueEnd = stringEnd(bytes, from: next).map { $0 + 1 }
                if let valueEnd {
                    let raw = bytes[(next + 1)..<(valueEnd - 1)]
                    secrets.add(String(decoding: raw, as: UTF8.self))
                    secrets.add(unescaped(raw))
                }
            } else {
                var numberEnd = next
                while numberEnd < bytes.count,
                    (bytes[numberEnd] >= UInt8(ascii: "0") && bytes[numberEnd] <= UInt8(ascii: "9")) || "+-.eE".utf8.contains(bytes[numberEnd])
                {
                    numberEnd += 1
                }
                valueEnd = numberEnd > next ? numberEnd : nil
                if valueEnd != nil { secrets.add(String(decoding: bytes[next..<numberEnd], as: UTF8.self)) }
            }
            guard let valueEnd else {
                index = end + 1
                continue
            }
            output.append(contentsOf: bytes[(end + 1)..<next])
            output.append(contentsOf: Array("\"\(HARRedaction.placeholder)\"".utf8))
            changed = true
            index = valueEnd
        }
        return changed ? Data(output) : body
    }

    /// The index of the quote closing the string that opens at `start`; `nil` when it is cut short.
    static func stringEnd(_ bytes: [UInt8], from start: Int) -> Int? {
        var index = start + 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\\"): index += 2
            case UInt8(ascii: "\""): return index
            default: index += 1
            }
        }
        return nil
    }

    static func skipSpace(_ bytes: [UInt8], from start: Int) -> Int {
        var index = start
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        return index
    }

    /// A string's content with JSON's escapes undone (`\uXXXX` of the basic plane included).
    static func unescaped(_ raw: ArraySlice<UInt8>) -> String {
        guard raw.contains(UInt8(ascii: "\\")) else { return String(decoding: raw, as: UTF8.self) }
        var scalars = String.UnicodeScalarView()
        var iterator = String(decoding: raw, as: UTF8.self).unicodeScalars.makeIterator()
        while let scalar = iterator.next() {
            guard scalar == "\\", let escaped = iterator.next() else {
                scalars.append(scalar)
                continue
            }
            switch escaped {
            case "n": scalars.append("\n")
            case "t": scalars.append("\t")
            case "r": scalars.append("\r")
            case "b": scalars.append("\u{8}")
            case "f": scalars.append("\u{C}")
            case "u":
                var hex = ""
                for _ in 0..<4 { if let digit = iterator.next() { hex.unicodeScalars.append(digit) } }
                if let value = UInt32(hex, radix: 16), let decoded = Unicode.Scalar(value) { scalars.append(decoded) }
            default: scalars.append(escaped)
            }
        }
        return String(scalars)
    }
}
