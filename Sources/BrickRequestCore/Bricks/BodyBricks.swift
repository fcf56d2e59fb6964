/// Sends a JSON body: ``RequestType/jsonBody`` when given, otherwise the text parameters as an object.
public protocol JSONBodyRequestType: RequestType {}

extension JSONBodyRequestType {
    /// ``ParameterEncoding/json``.
    public var parameterEncoding: ParameterEncoding { .json }
}

/// Sends `multipart/form-data` even without file parameters.
public protocol MultipartRequestType: RequestType {}

extension MultipartRequestType {
    /// ``ParameterEncoding/multipart``.
    public var parameterEncoding: ParameterEncoding { .multipart }
}
