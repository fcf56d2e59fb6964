import FoundationEssentials

/// Produces a typed value from the response.
///
/// The response bricks (``DataResponseType``, ``StringResponseType``, ``JSONResponseType``,
/// ``DecodableResponseType``, ``EmptyResponseType``) each fix ``SerializedObject`` and supply the
/// serializer. Failures are ``BrickError``s (``ResponseError``).
public protocol ResponseType: RequestType {
    /// The value a successful request produces.
    associatedtype SerializedObject: Sendable
    /// Turns the response into ``SerializedObject``.
    var responseSerializer: any ResponseSerializer<SerializedObject> { get }
}

extension ResponseType {
    /// The error type of every response: ``BrickError``.
    public typealias ResponseError = BrickError
}

/// The body as `Data`.
public protocol DataResponseType: ResponseType where SerializedObject == Data {}

extension DataResponseType {
    /// ``DataResponseSerializer``.
    public var responseSerializer: any ResponseSerializer<Data> { DataResponseSerializer() }
}

/// The body as a `String`.
public protocol StringResponseType: ResponseType where SerializedObject == String {}

extension StringResponseType {
    /// ``StringResponseSerializer``.
    public var responseSerializer: any ResponseSerializer<String> { StringResponseSerializer() }
}

/// The body as a ``JSON`` value: `response.value?["user"]["name"].string`.
public protocol JSONResponseType: ResponseType where SerializedObject == JSON {}

extension JSONResponseType {
    /// ``JSONResponseSerializer``.
    public var responseSerializer: any ResponseSerializer<JSON> { JSONResponseSerializer() }
}

/// The body decoded into ``Model`` with a `JSONDecoder`.
///
/// ```swift
/// final class GetOrder: Component, GETRequestType, DecodableResponseType {
///     typealias Model = Order
///     var urlString: String { "https://api.example.com/orders/1" }
/// }
/// ```
public protocol DecodableResponseType: ResponseType where SerializedObject == Model {
    /// The decoded type.
    associatedtype Model: Decodable & Sendable
    /// The decoder (date and key strategies). Default: a plain `JSONDecoder`.
    var jsonDecoder: JSONDecoder { get }
}

extension DecodableResponseType {
    /// A plain `JSONDecoder`.
    public var jsonDecoder: JSONDecoder { JSONDecoder() }

    /// ``DecodableResponseSerializer`` with ``jsonDecoder``.
    public var responseSerializer: any ResponseSerializer<Model> {
        DecodableResponseSerializer<Model>(decoder: jsonDecoder)
    }
}

/// The body written to a file as it arrives, never held in memory: large downloads. The value is
/// the file's URL.
///
/// ```swift
/// final class DownloadBackup: Component, GETRequestType, ValidatedResponseType, DownloadResponseType {
///     var urlString: String { "https://api.example.com/backups/latest" }
///     var downloadDestination: URL { URL(fileURLWithPath: "/var/backups/latest.tar.gz") }
/// }
/// let file = try await DownloadBackup().value
/// ```
///
/// Each attempt writes a new file next to the destination (a retry starts over), flushes it to
/// disk and only then moves it onto ``downloadDestination``, replacing what was there: nobody sees
/// a partial body at the destination, and a transfer that fails or is cancelled removes its
/// partial file and leaves the destination as it was (yesterday's backup survives today's failed
/// download). A response that arrives whole but fails validation has replaced the destination
/// with its body (the server's error document).
///
/// The session's ``RequestType/maxResponseSize`` (256 MiB by default) applies to downloads too:
/// an endpoint that fetches more sets its own.
///
/// With retries (``AutoRetryType``), an attempt cut off mid-body is continued by the next one
/// rather than started over, when the server allows it: the response carried a strong `ETag` or a
/// `Last-Modified` date and was not content-encoded. The retry asks for the rest (`Range`, with
/// `If-Range` so a resource that changed meanwhile comes whole) and appends it; the final
/// response is then the server's `206 Partial Content`. The part kept between attempts is deleted
/// when the request finally fails or is cancelled.
public protocol DownloadResponseType: ResponseType where SerializedObject == URL {
    /// The file the body goes to: a file URL.
    var downloadDestination: URL { get }
}

extension DownloadResponseType {
    /// ``TransportRequest/ResponseDestination/file(path:)`` at ``downloadDestination``; a URL that
    /// is not a file URL makes the request fail with ``BrickError/Code/invalidRequest``.
    public var responseDestination: TransportRequest.ResponseDestination {
        .file(path: downloadDestination.isFileURL ? downloadDestination.path : "")
    }
    /// ``DownloadResponseSerializer``.
    public var responseSerializer: any ResponseSerializer<URL> { DownloadResponseSerializer() }
}

/// Ignores the body.
public protocol EmptyResponseType: ResponseType where SerializedObject == Empty {}

extension EmptyResponseType {
    /// ``EmptyResponseSerializer``.
    public var responseSerializer: any ResponseSerializer<Empty> { EmptyResponseSerializer() }
}

/// Checks the status code and content type before serialization; a mismatch is a
/// ``BrickError/Code/unacceptableStatusCode`` or ``BrickError/Code/unacceptableContentType`` error
/// that keeps the status and body.
public protocol ValidatedResponseType: ResponseType {
    /// Accepted status codes. Default `200..<300`.
    var acceptableStatusCodes: Range<Int> { get }
    /// Accepted media types (`application/json`, `text/*`), or `nil` for any. Default `nil`.
    var acceptableContentTypes: [String]? { get }
}

extension ValidatedResponseType {
    /// `200..<300`.
    public var acceptableStatusCodes: Range<Int> { 200..<300 }
    /// Any content type.
    public var acceptableContentTypes: [String]? { nil }
    /// Validation from ``acceptableStatusCodes`` and ``acceptableContentTypes``.
    public var responseValidation: ResponseValidation? {
        ResponseValidation(statusCodes: acceptableStatusCodes, contentTypes: acceptableContentTypes)
    }
}
