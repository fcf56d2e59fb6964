/// A value that can be sent as a text parameter.
///
/// Strings are sent as they are, integers and floating-point numbers in their Swift description
/// (`100`, `1.5`), and `Bool` as `"1"` / `"0"` (as BrickRequest always has). A type of your own
/// that is `LosslessStringConvertible` conforms with an empty extension and is sent as its
/// `description`.
public protocol ParameterStringConvertible: Sendable {
    /// The parameter's text.
    var parameterString: String { get }
}

extension ParameterStringConvertible where Self: LosslessStringConvertible {
    /// The value's `description`: the decimal digits of an integer, Swift's shortest
    /// round-tripping form of a floating-point number (`1.5`), a string itself.
    public var parameterString: String { description }
}

extension String: ParameterStringConvertible {}
extension Substring: ParameterStringConvertible {}
extension Int: ParameterStringConvertible {}
extension Int8: ParameterStringConvertible {}
extension Int16: ParameterStringConvertible {}
extension Int32: ParameterStringConvertible {}
extension Int64: ParameterStringConvertible {}
extension UInt: ParameterStringConvertible {}
extension UInt8: ParameterStringConvertible {}
extension UInt16: ParameterStringConvertible {}
extension UInt32: ParameterStringConvertible {}
extension UInt64: ParameterStringConvertible {}
extension Float: ParameterStringConvertible {}
extension Double: ParameterStringConvertible {}

extension Bool: ParameterStringConvertible {
    /// `"1"` for `true`, `"0"` for `false`.
    public var parameterString: String { self ? "1" : "0" }
}
