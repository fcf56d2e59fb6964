/// Small pieces of text syntax — HTTP's (RFC 9110 §5.6) and fixed-width numbers — shared by the
/// parsers and printers that need them.
extension StringProtocol {
    /// The text without leading and trailing spaces and horizontal tabs (HTTP's optional whitespace).
    func trimmingSpacesAndTabs() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }

    /// The value of a non-empty run of decimal digits (HTTP's `1*DIGIT`: no sign, no spaces), or
    /// `nil` for anything else or a value beyond `Int64`. (`Int64(_:)` would also take a sign.)
    package var decimalDigitsValue: Int64? {
        guard !isEmpty, utf8.allSatisfy(\.isASCIIDigit) else { return nil }
        return Int64(self)
    }

    /// A `delta-seconds` (RFC 9111 §1.2.2): a non-empty run of decimal digits, its value capped at
    /// 2^31 — a value too large for an integer counts as 2^31, never as nothing.
    var deltaSecondsValue: Int64? {
        guard !isEmpty, utf8.allSatisfy(\.isASCIIDigit) else { return nil }
        let cap = Int64(1) << 31
        return utf8.count > 10 ? cap : Swift.min(Int64(self) ?? cap, cap)
    }
}

extension UInt8 {
    /// Whether the byte is an ASCII decimal digit, `0` to `9`.
    var isASCIIDigit: Bool { self &- UInt8(ascii: "0") < 10 }

    /// Whether the byte may appear in an HTTP token (a field name, a method): `tchar` of
    /// RFC 9110 §5.6.2.
    var isTokenByte: Bool {
        switch self {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(self)
        }
    }
}

extension BinaryInteger {
    /// The non-negative value in `radix`, lowercase, with leading zeros up to `width` digits
    /// (`%0*x` / `%0*d`): `\u000a` escapes, `\x0a` bytes, the `.050` of 1.050 s.
    package func zeroPadded(width: Int, radix: Int = 10) -> String {
        let digits = String(self, radix: radix)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
