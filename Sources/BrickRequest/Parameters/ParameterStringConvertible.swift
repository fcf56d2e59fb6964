/// A value that can be sent as a text parameter.
///
/// Strings are sent as they are, integers and floating-point numbers in their Swift description
/// (`100`, `1.5`), and `Bool` as `"1"` / `"0"` (as BrickRequest always has).
public protocol ParameterStringConvertible: Sendable {
    /// The parameter's text.
    var parameterString: String { get }
}

extension String: ParameterStringConvertible {
    /// The string itself.
    public var parameterString: String { self }
}

extension Substring: ParameterStringConvertible {
    /// The substring as a string.
    public var parameterString: String { String(self) }
}

extension Bool: ParameterStringConvertible {
    /// `"1"` for `true`, `"0"` for `false`.
    public var parameterString: String { self ? "1" : "0" }
}

extension Int: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension Int8: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension Int16: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension Int32: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension Int64: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension UInt: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension UInt8: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension UInt16: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension UInt32: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension UInt64: ParameterStringConvertible {
    /// The decimal digits.
    public var parameterString: String { String(self) }
}

extension Float: ParameterStringConvertible {
    /// Swift's shortest round-tripping description, e.g. `1.5`.
    public var parameterString: String { String(self) }
}

extension Double: ParameterStringConvertible {
    /// Swift's shortest round-tripping description, e.g. `1.5`.
    public var parameterString: String { String(self) }
}
