import HTTPTypes

/// The `Cache-Control` directives of a request or a response (RFC 9111 §5.2), parsed once.
///
/// Unknown directives are ignored; a directive whose argument is not valid (`max-age=soon`) is
/// taken in its most cautious reading: an invalid `max-age` makes the response stale
/// (RFC 9111 §4.2.1). Qualified `no-cache="Set-Cookie"` and `private="…"` are taken unqualified,
/// which a private cache may do.
package struct CacheControl: Sendable, Hashable {
    /// `max-age`: the freshness lifetime (response) or the oldest acceptable age (request).
    package var maxAge: Duration?
    /// `s-maxage`: for shared caches; read, and ignored by this private cache except that it lets a
    /// response to an authorized request be stored (RFC 9111 §3.5).
    package var sharedMaxAge: Duration?
    /// `no-store`: nothing of this exchange may be stored.
    package var noStore = false
    /// `no-cache`: a stored response must be revalidated before each use.
    package var noCache = false
    /// `must-revalidate`: once stale, the response must not be used without revalidation, not even
    /// when the server cannot be reached.
    package var mustRevalidate = false
    /// `public`.
    package var isPublic = false
    /// `private`: for a private cache such as this one, no restriction.
    package var isPrivate = false
    /// `immutable` (RFC 8246): the response will not change while fresh.
    package var immutable = false
    /// `stale-while-revalidate` (RFC 5861): how long after it turns stale the response may be used
    /// while it is revalidated in the background.
    package var staleWhileRevalidate: Duration?
    /// `stale-if-error` (RFC 5861): how long after it turns stale the response may be used when
    /// revalidation fails (no network, a 5xx).
    package var staleIfError: Duration?
    /// `max-stale` (request): a stale response is acceptable, up to this much past its lifetime;
    /// ``unlimited`` when given without a value (any staleness).
    package var maxStale: Duration?
    /// `min-fresh` (request): the response must stay fresh at least this much longer.
    package var minFresh: Duration?
    /// `only-if-cached` (request): answer from the cache or fail with `504`-like ``BrickError/Code/notCached``.
    package var onlyIfCached = false
    /// Whether a directive's argument could not be read (`max-age=soon`, `max-age` twice with
    /// different values): such a response is treated as stale.
    package var hasInvalidFreshness = false

    /// No directives.
    package init() {}

    /// The duration that stands for "no limit" (`max-stale` without a value): 2^40 seconds, large
    /// enough for any age and small enough for `Duration` arithmetic.
    package static let unlimited = Duration.seconds(Int64(1) << 40)

    /// The directives of every `Cache-Control` field in `fields`; with none, a request's
    /// `Pragma: no-cache` (RFC 9111 §5.4) reads as `no-cache`.
    ///
    /// - Parameter fields: Request or response header fields.
    package init(_ fields: HTTPFields) {
        var cacheControl: [String] = []
        var pragma: String?
        for field in fields {
            if field.name == .cacheControl {
                cacheControl.append(field.value)
            } else if field.name == .pragma {
                pragma = pragma.map { $0 + ", " + field.value } ?? field.value
            }
        }
        self.init(cacheControl: cacheControl, pragma: pragma)
    }

    /// The directives of `cacheControl` (the values of every `Cache-Control` field, in order); with
    /// none, `pragma` (every `Pragma` value, joined) holding `no-cache` reads as `no-cache`.
    package init(cacheControl: [String], pragma: String?) {
        for value in cacheControl { parse(value) }
        if cacheControl.isEmpty, let pragma,
            pragma.split(separator: ",").contains(where: { $0.trimmingSpacesAndTabs().lowercased() == "no-cache" })
        {
            noCache = true
        }
    }

    private mutating func parse(_ value: String) {
        for (name, argument) in Self.directives(value) {
            switch name {
            case "max-age": maxAge = delta(maxAge, argument)
            case "s-maxage": sharedMaxAge = delta(sharedMaxAge, argument)
            case "no-store": noStore = true
            case "no-cache": noCache = true
            case "must-revalidate", "proxy-revalidate": mustRevalidate = mustRevalidate || name == "must-revalidate"
            case "public": isPublic = true
            case "private": isPrivate = true
            case "immutable": immutable = true
            case "stale-while-revalidate": staleWhileRevalidate = delta(staleWhileRevalidate, argument)
            case "stale-if-error": staleIfError = delta(staleIfError, argument)
            case "max-stale":
                if argument == nil { maxStale = Self.unlimited } else { maxStale = delta(maxStale, argument) }
            case "min-fresh": minFresh = delta(minFresh, argument)
            case "only-if-cached": onlyIfCached = true
            default: break
            }
        }
    }

    /// A delta-seconds directive's value (RFC 9111 §1.2.2): digits only; a value too large for the
    /// arithmetic is taken as 2^31 seconds, as the RFC asks. A missing or bad argument, or a second
    /// different value, marks the freshness invalid.
    private mutating func delta(_ existing: Duration?, _ argument: String?) -> Duration? {
        guard let seconds = argument?.deltaSecondsValue else {
            hasInvalidFreshness = true
            return existing
        }
        let value = Duration.seconds(seconds)
        if let existing, existing != value { hasInvalidFreshness = true }
        return min(existing ?? value, value)
    }

    /// `name[=token|quoted-string]` items of a `Cache-Control` value, names lowercased; commas
    /// inside quoted strings do not split.
    static func directives(_ value: String) -> [(String, String?)] {
        // Read from the bytes (every stored response's value is read on every hit): the
        // delimiters are ASCII, and what lies between them is kept as it came.
        var result: [(String, String?)] = []
        var value = value
        value.withUTF8 { bytes in
            var start = 0
            var quoted = false
            var escaped = false
            for index in 0...bytes.count {
                if index < bytes.count {
                    let byte = bytes[index]
                    if escaped {
                        escaped = false
                        continue
                    }
                    if quoted && byte == UInt8(ascii: "\\") {
                        escaped = true
                        continue
                    }
                    if byte == UInt8(ascii: "\"") {
                        quoted.toggle()
                        continue
                    }
                    if byte != UInt8(ascii: ",") || quoted { continue }
                }
                if let directive = directive(UnsafeBufferPointer(rebasing: bytes[start..<index])) { result.append(directive) }
                start = index + 1
            }
        }
        return result
    }

    /// One `name[=argument]` item: the name trimmed and lower-cased, the argument trimmed and
    /// unquoted (its backslashes dropped); `nil` for an empty item.
    private static func directive(_ item: UnsafeBufferPointer<UInt8>) -> (String, String?)? {
        let item = trimmed(item)
        guard !item.isEmpty else { return nil }
        guard let equals = item.firstIndex(of: UInt8(ascii: "=")) else { return (lowercased(item), nil) }
        let name = lowercased(trimmed(UnsafeBufferPointer(rebasing: item[..<equals])))
        let argument = trimmed(UnsafeBufferPointer(rebasing: item[(equals + 1)...]))
        if argument.count >= 2, argument.first == UInt8(ascii: "\""), argument.last == UInt8(ascii: "\"") {
            let inner = argument[1..<(argument.count - 1)].filter { $0 != UInt8(ascii: "\\") }
            return (name, String(decoding: inner, as: UTF8.self))
        }
        return (name, String(decoding: argument, as: UTF8.self))
    }

    private static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8> {
        var start = 0
        var end = bytes.count
        while start < end && (bytes[start] == 0x20 || bytes[start] == 0x09) { start += 1 }
        while end > start && (bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09) { end -= 1 }
        return UnsafeBufferPointer(rebasing: bytes[start..<end])
    }

    /// ASCII letters lower-cased; every other byte as it is.
    private static func lowercased(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        String(unsafeUninitializedCapacity: bytes.count) { buffer in
            for (index, byte) in bytes.enumerated() {
                buffer[index] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            }
            return bytes.count
        }
    }
}

extension HTTPField.Name {
    static let pragma = HTTPField.Name("Pragma")!
}
