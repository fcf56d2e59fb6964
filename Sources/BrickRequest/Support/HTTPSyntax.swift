/// Small pieces of HTTP's text syntax (RFC 9110 §5.6), shared by the parsers that need them.
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
    var decimalDigitsValue: Int64? {
        guard !isEmpty, utf8.allSatisfy({ $0 &- UInt8(ascii: "0") < 10 }) else { return nil }
        return Int64(self)
    }
}
