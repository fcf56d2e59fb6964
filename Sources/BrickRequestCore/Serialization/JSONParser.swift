import FoundationEssentials

/// Why JSON text could not be parsed: what was wrong, and at which byte.
public struct JSONParsingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The byte offset in the input at which the problem was found.
    public let offset: Int
    /// What was wrong, in words.
    public let reason: String

    /// Creates the error.
    ///
    /// - Parameters:
    ///   - offset: The byte offset in the input at which the problem was found.
    ///   - reason: What was wrong.
    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    /// A description for logs: the reason and the offset.
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

/// A strict RFC 8259 parser over UTF-8 bytes: any value at the top level, no trailing commas or
/// comments, strings checked to be valid UTF-8 with paired surrogates, nesting limited to
/// ``maximumDepth`` (deeper input is an error, not a stack overflow).
struct JSONParser {
    /// The deepest nesting of arrays and objects accepted.
    static let maximumDepth = 512

    private let bytes: UnsafeRawBufferPointer
    private var index = 0
    private var depth = 0

    private init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// Parses one JSON text.
    static func parse(_ data: Data) throws(JSONParsingError) -> JSON {
        let result = data.withUnsafeBytes { buffer -> Result<JSON, JSONParsingError> in
            var parser = JSONParser(buffer)
            do throws(JSONParsingError) {
                return .success(try parser.parseDocument())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private mutating func parseDocument() throws(JSONParsingError) -> JSON {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw failure("unexpected content after the value") }
        return value
    }

    private func failure(_ reason: String) -> JSONParsingError {
        JSONParsingError(offset: index, reason: reason)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue() throws(JSONParsingError) -> JSON {
        guard index < bytes.count else { throw failure("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try parseNumber())
        default:
            throw failure("unexpected character")
        }
    }

    private mutating func expect(_ literal: StaticString) throws(JSONParsingError) {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw failure("unexpected end of input") }
        let expected = UnsafeRawBufferPointer(start: literal.utf8Start, count: count)
        for offset in 0..<count where bytes[index + offset] != expected[offset] {
            index += offset
            throw failure("invalid literal")
        }
        index += count
    }

    /// Past an opening `[` or `{`: counts the level and reports whether `closing` follows at once.
    private mutating func enterContainer(closing: UInt8) throws(JSONParsingError) -> Bool {
        depth += 1
        guard depth <= Self.maximumDepth else { throw failure("nested deeper than \(Self.maximumDepth) levels") }
        index += 1
        skipWhitespace()
        return closes(closing)
    }

    /// After an element or member: `true` past the `closing` bracket (the container ends),
    /// `false` past a `,` (another one follows).
    private mutating func endOfElement(closing: UInt8, in container: String) throws(JSONParsingError) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw failure("unexpected end of input in \(container)") }
        if closes(closing) { return true }
        guard bytes[index] == UInt8(ascii: ",") else {
            throw failure("expected ',' or '\(Character(Unicode.Scalar(closing)))' in \(container)")
        }
        index += 1
        skipWhitespace()
        return false
    }

    private mutating func closes(_ closing: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == closing else { return false }
        index += 1
        depth -= 1
        return true
    }

    private mutating func parseArray() throws(JSONParsingError) -> JSON {
        var elements: [JSON] = []
        if try enterContainer(closing: UInt8(ascii: "]")) { return .array(elements) }
        repeat {
            elements.append(try parseValue())
        } while try !endOfElement(closing: UInt8(ascii: "]"), in: "an array")
        return .array(elements)
    }

    private mutating func parseObject() throws(JSONParsingError) -> JSON {
        var members: [String: JSON] = [:]
        if try enterContainer(closing: UInt8(ascii: "}")) { return .object(members) }
        repeat {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw failure("expected a string key in an object")
            }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw failure("expected ':' after an object key")
            }
            index += 1
            skipWhitespace()
            members[key] = try parseValue()
        } while try !endOfElement(closing: UInt8(ascii: "}"), in: "an object")
        return .object(members)
    }

    /// A string, from its opening quote to past its closing one.
    private mutating func parseString() throws(JSONParsingError) -> String {
        let start = index
        index += 1
        // Fast path: no escapes.
        var scan = index
        while scan < bytes.count {
            let byte = bytes[scan]
            if byte == UInt8(ascii: "\"") {
                guard let string = String(validating: bytes[index..<scan], as: UTF8.self) else {
                    index = start
                    throw failure("a string is not valid UTF-8")
                }
                index = scan + 1
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 {
                index = scan
                throw failure("a control character in a string must be escaped")
            }
            scan += 1
        }
        var utf8 = Array(bytes[index..<scan])
        index = scan
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = String(validating: utf8, as: UTF8.self) else {
                    index = start
                    throw failure("a string is not valid UTF-8")
                }
                return string
            case UInt8(ascii: "\\"):
                try parseEscape(into: &utf8)
            case 0..<0x20:
                throw failure("a control character in a string must be escaped")
            default:
                utf8.append(byte)
                index += 1
            }
        }
        throw failure("unterminated string")
    }

    private mutating func parseEscape(into utf8: inout [UInt8]) throws(JSONParsingError) {
        guard index + 1 < bytes.count else { throw failure("unterminated string") }
        let escaped = bytes[index + 1]
        index += 2
        switch escaped {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escaped)
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0C)
        case UInt8(ascii: "n"): utf8.append(0x0A)
        case UInt8(ascii: "r"): utf8.append(0x0D)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try parseHex4())
            if (0xD800...0xDBFF).contains(scalar) {
                guard bytes.count - index >= 2, bytes[index] == UInt8(ascii: "\\"),
                    bytes[index + 1] == UInt8(ascii: "u")
                else { throw failure("a high surrogate without its low surrogate") }
                index += 2
                let low = UInt32(try parseHex4())
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw failure("a high surrogate without its low surrogate")
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw failure("a low surrogate without its high surrogate")
            }
            // Every value left is a valid scalar: surrogates were paired or refused above.
            Unicode.UTF8.encode(Unicode.Scalar(scalar).unsafelyUnwrapped) { utf8.append($0) }
        default:
            index -= 1
            throw failure("an invalid escape sequence")
        }
    }

    private mutating func parseHex4() throws(JSONParsingError) -> UInt16 {
        guard bytes.count - index >= 4 else { throw failure("a \\u escape needs four hex digits") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("a \\u escape needs four hex digits")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    /// A number per RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    private mutating func parseNumber() throws(JSONParsingError) -> Double {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, bytes[index].isASCIIDigit else { throw failure("a number needs a digit") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, bytes[index].isASCIIDigit { throw failure("a number cannot have a leading zero") }
        } else {
            skipDigits()
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, bytes[index].isASCIIDigit else { throw failure("a digit must follow '.'") }
            skipDigits()
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, bytes[index].isASCIIDigit else {
                throw failure("a digit must follow the exponent")
            }
            skipDigits()
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            index = start
            throw failure("a number out of the range of a double")
        }
        return value
    }

    private mutating func skipDigits() {
        while index < bytes.count, bytes[index].isASCIIDigit { index += 1 }
    }
}

extension JSON {
    /// `string` as a JSON string literal: quotes, backslashes and control characters escaped.
    static func quoted(_ string: String) -> String {
        var result = "\""
        result.reserveCapacity(string.utf8.count + 2)
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case "\u{08}": result += "\\b"
            case "\u{0C}": result += "\\f"
            case "\u{00}"..."\u{1F}":
                result += "\\u" + scalar.value.zeroPadded(width: 4, radix: 16)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
