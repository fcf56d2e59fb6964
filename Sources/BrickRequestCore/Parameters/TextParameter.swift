/// A named text parameter whose value may be missing.
///
/// A `nil` value is left out of the request, unless `catchOnNil` supplies a fallback:
///
/// ```swift
/// TextParameter(value: user.nickname, name: "nickname")                       // omitted when nil
/// TextParameter(value: page, name: "page", catchOnNil: { 1 })                 // "1" when nil
/// TextParameter(value: true, name: "verbose")                                 // "1"
/// ```
public struct TextParameter<T: ParameterStringConvertible>: Sendable {
    /// The parameter's name.
    public let name: String
    /// The value, or `nil`.
    public let value: T?
    private let fallback: (@Sendable () -> T?)?

    /// Creates a text parameter.
    ///
    /// - Parameters:
    ///   - value: The value; `nil` omits the parameter unless `catchOnNil` gives a fallback.
    ///   - name: The parameter's name.
    ///   - catchOnNil: Produces the value to send when `value` is `nil`.
    public init(value: T?, name: String, catchOnNil: (@Sendable () -> T?)? = nil) {
        self.value = value
        self.name = name
        self.fallback = catchOnNil
    }

    /// A copy whose missing value is replaced by `fallback()` (a fluent form).
    ///
    /// - Parameter fallback: Produces the value to send when `value` is `nil`.
    /// - Returns: The parameter with the fallback.
    public func catchOnNil(_ fallback: @escaping @Sendable () -> T?) -> TextParameter<T> {
        TextParameter(value: value, name: name, catchOnNil: fallback)
    }

    /// The text sent: the value's ``ParameterStringConvertible/parameterString``, the fallback's, or `nil`.
    public var string: String? {
        (value ?? fallback?())?.parameterString
    }
}
