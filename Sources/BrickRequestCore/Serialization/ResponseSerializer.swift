import FoundationEssentials

/// Turns a transport response into a value.
///
/// A serializer runs after validation, off the transport's thread. Throw a ``BrickError`` with code
/// ``BrickError/Code/serializationFailed`` when the body cannot become the value.
///
/// Implementation requirements: be a pure function of the response (serializers are shared by every
/// request of a type and may run concurrently).
public protocol ResponseSerializer<SerializedObject>: Sendable {
    /// The value produced.
    associatedtype SerializedObject: Sendable
    /// Produces the value from a response.
    ///
    /// - Parameter response: The response (any status that passed validation).
    /// - Returns: The value.
    /// - Throws: ``BrickError``.
    func serialize(_ response: TransportResponse) throws(BrickError) -> SerializedObject
}

/// The body as `Data` (empty when there is none).
public struct DataResponseSerializer: ResponseSerializer {
    /// Creates the serializer.
    public init() {}
    /// Returns the body.
    ///
    /// - Parameter response: The response.
    /// - Returns: Its body, or empty data.
    public func serialize(_ response: TransportResponse) throws(BrickError) -> Data {
        response.body ?? Data()
    }
}

/// The file the body was written to, for a response whose destination was a file
/// (``DownloadResponseType``).
public struct DownloadResponseSerializer: ResponseSerializer {
    /// Creates the serializer.
    public init() {}
    /// Returns the file's URL.
    ///
    /// - Parameter response: The response.
    /// - Returns: The URL of `bodyFile`.
    /// - Throws: ``BrickError/Code/serializationFailed`` when the body did not go to a file.
    public func serialize(_ response: TransportResponse) throws(BrickError) -> URL {
        guard let path = response.bodyFile else {
            throw BrickError(
                .serializationFailed,
                message: "the response body was not written to a file",
                status: response.status
            )
        }
        return URL(fileURLWithPath: path)
    }
}

/// The body decoded as text, in the charset of `Content-Type` (UTF-8 by default).
public struct StringResponseSerializer: ResponseSerializer {
    /// Creates the serializer.
    public init() {}
    /// Decodes the body as text.
    ///
    /// - Parameter response: The response.
    /// - Returns: The text.
    /// - Throws: ``BrickError/Code/serializationFailed`` when the bytes are not valid in the charset.
    public func serialize(_ response: TransportResponse) throws(BrickError) -> String {
        let data = response.body ?? Data()
        let contentType = response.headerFields[.contentType]?.lowercased() ?? ""
        let encoding: String.Encoding =
            contentType.contains("charset=iso-8859-1") || contentType.contains("charset=latin1") ? .isoLatin1 : .utf8
        guard let text = String(data: data, encoding: encoding) else {
            throw BrickError(
                .serializationFailed,
                message: "the body is not valid \(encoding == .utf8 ? "UTF-8" : "ISO-8859-1") text",
                status: response.status,
                responseBody: data
            )
        }
        return text
    }
}

/// The body parsed as a ``JSON`` value.
public struct JSONResponseSerializer: ResponseSerializer {
    /// Creates the serializer.
    public init() {}
    /// Parses the body.
    ///
    /// - Parameter response: The response.
    /// - Returns: The JSON value.
    /// - Throws: ``BrickError/Code/serializationFailed`` for an empty or malformed body.
    public func serialize(_ response: TransportResponse) throws(BrickError) -> JSON {
        guard let data = response.body, !data.isEmpty else {
            throw BrickError(
                .serializationFailed,
                message: "the response has no body to parse as JSON",
                status: response.status
            )
        }
        do {
            return try JSON(data: data)
        } catch {
            throw BrickError(
                .serializationFailed,
                message: "the body is not valid JSON",
                underlying: error,
                status: response.status,
                responseBody: data
            )
        }
    }
}

/// The body decoded into a `Decodable` model with a `JSONDecoder`.
public struct DecodableResponseSerializer<Model: Decodable & Sendable>: ResponseSerializer {
    private let decoder: JSONDecoder

    /// Creates the serializer.
    ///
    /// - Parameter decoder: The decoder to use.
    public init(decoder: JSONDecoder = JSONDecoder()) {
        self.decoder = decoder
    }

    /// Decodes the body.
    ///
    /// - Parameter response: The response.
    /// - Returns: The model.
    /// - Throws: ``BrickError/Code/serializationFailed`` naming the failing key path.
    public func serialize(_ response: TransportResponse) throws(BrickError) -> Model {
        let data = response.body ?? Data()
        do {
            return try decoder.decode(Model.self, from: data)
        } catch let error as DecodingError {
            throw BrickError(
                .serializationFailed,
                message: "cannot decode \(Model.self): \(Self.describe(error))",
                underlying: error,
                status: response.status,
                responseBody: data
            )
        } catch {
            throw BrickError(
                .serializationFailed,
                message: "cannot decode \(Model.self)",
                underlying: error,
                status: response.status,
                responseBody: data
            )
        }
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.isEmpty ? "the top level" : context.codingPath.map(\.stringValue).joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing key \(key.stringValue) at \(path(context))"
        case .typeMismatch(let type, let context): return "expected \(type) at \(path(context))"
        case .valueNotFound(let type, let context): return "null where \(type) was expected at \(path(context))"
        case .dataCorrupted(let context): return "malformed data at \(path(context))"
        @unknown default: return "\(error)"
        }
    }
}

/// Ignores the body; succeeds with `Void`-like ``Empty``.
public struct EmptyResponseSerializer: ResponseSerializer {
    /// Creates the serializer.
    public init() {}
    /// Returns ``Empty/value``.
    ///
    /// - Parameter response: The response.
    /// - Returns: ``Empty/value``.
    public func serialize(_ response: TransportResponse) throws(BrickError) -> Empty {
        .value
    }
}

/// The value of a request whose body does not matter.
public struct Empty: Sendable, Hashable, Codable {
    /// The only value.
    public static let value = Empty()
}
