import FoundationEssentials

/// A parsed JSON value that subscripts without ceremony: `json["user"]["name"].string`.
///
/// Subscripting a missing key, an out-of-range index or a value of another type gives ``null``,
/// so chains never crash; the typed accessors (``string``, ``int``, ``double``, ``bool``, ``array``,
/// ``object``) return `nil` when the value is not of that type.
public enum JSON: Sendable, Hashable, CustomStringConvertible {
    /// A string.
    case string(String)
    /// A number.
    case number(Double)
    /// `true` or `false`.
    case bool(Bool)
    /// An array.
    case array([JSON])
    /// An object.
    case object([String: JSON])
    /// `null`, or a missing value.
    case null

    /// Parses JSON text (RFC 8259; any value at the top level).
    ///
    /// - Parameter data: UTF-8 JSON.
    /// - Throws: ``JSONParsingError`` for malformed input, with the byte offset of the problem.
    public init(data: Data) throws(JSONParsingError) {
        self = try JSONParser.parse(data)
    }

    /// The value for `key` in an object, or ``null``.
    public subscript(key: String) -> JSON {
        if case .object(let object) = self { return object[key] ?? .null }
        return .null
    }

    /// The element at `index` in an array, or ``null``.
    public subscript(index: Int) -> JSON {
        if case .array(let array) = self, array.indices.contains(index) { return array[index] }
        return .null
    }

    /// The string, if this is a string.
    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number as a `Double`, if this is a number.
    public var double: Double? {
        if case .number(let value) = self { return value }
        return nil
    }

    /// The number as an `Int`, if this is a number with an integral value.
    public var int: Int? {
        if case .number(let value) = self, value.rounded() == value, abs(value) < 9.007_199_254_740_992e15 {
            return Int(value)
        }
        return nil
    }

    /// The Boolean, if this is `true` or `false`.
    public var bool: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The elements, if this is an array.
    public var array: [JSON]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members, if this is an object.
    public var object: [String: JSON]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// Whether this is `null` (or missing).
    public var isNull: Bool { self == .null }

    /// Compact JSON text.
    public var description: String {
        switch self {
        case .string(let value):
            return JSON.quoted(value)
        case .number(let value):
            return value.rounded() == value && abs(value) < 1e15 ? String(Int(value)) : String(value)
        case .bool(let value): return value ? "true" : "false"
        case .array(let values): return "[" + values.map(\.description).joined(separator: ",") + "]"
        case .object(let members):
            return "{"
                + members.sorted { $0.key < $1.key }.map {
                    JSON.string($0.key).description + ":" + $0.value.description
                }
                .joined(separator: ",") + "}"
        case .null: return "null"
        }
    }
}
