/// A `GET` request.
public protocol GETRequestType: RequestType {}
extension GETRequestType {
    /// `GET`.
    public var method: HTTPRequest.Method { .get }
}

/// A `POST` request.
public protocol POSTRequestType: RequestType {}
extension POSTRequestType {
    /// `POST`.
    public var method: HTTPRequest.Method { .post }
}

/// A `PUT` request.
public protocol PUTRequestType: RequestType {}
extension PUTRequestType {
    /// `PUT`.
    public var method: HTTPRequest.Method { .put }
}

/// A `PATCH` request.
public protocol PATCHRequestType: RequestType {}
extension PATCHRequestType {
    /// `PATCH`.
    public var method: HTTPRequest.Method { .patch }
}

/// A `DELETE` request.
public protocol DELETERequestType: RequestType {}
extension DELETERequestType {
    /// `DELETE`.
    public var method: HTTPRequest.Method { .delete }
}

/// A `HEAD` request.
public protocol HEADRequestType: RequestType {}
extension HEADRequestType {
    /// `HEAD`.
    public var method: HTTPRequest.Method { .head }
}
