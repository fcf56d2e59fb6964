import FoundationEssentials

/// Reads an endpoint's bricks and produces the `Sendable` request the transport sends.
///
/// Runs on the caller's side, so a non-`Sendable` ``Component`` never crosses threads.
package enum RequestRenderer {
    /// - Parameters:
    ///   - request: The endpoint.
    ///   - session: The session that sends it.
    ///   - startsRequest: Whether the request is rendered to be sent; it then takes the
    ///     component's progress handler (see ``RequestType/progress(_:)``), which stays with the
    ///     rendered request for every attempt.
    ///   - forStorage: Whether the request is kept to be sent later by another session: it then
    ///     carries only the endpoint's own egress policy, not this session's.
    package static func render(
        _ request: some RequestType,
        session: Session,
        startsRequest: Bool = false,
        forStorage: Bool = false
    ) throws(BrickError) -> TransportRequest {
        let component = request as? Component
        let parameters = component?.parameterBuilder ?? ParameterBuilder()
        var progress: (@Sendable (TransportRequest.Progress) -> Void)? = nil
        if startsRequest, let component, let handler = component.progressHandler {
            component.progressHandler = nil
            // The transport reports only changes, on its thread; the handler runs on the callback queue.
            let callbacks = session.callbacks
            progress = { figures in callbacks.submit { handler(figures) } }
        }
        let method = request.method
        var url = request.urlString
        if let origin = session.configuration.originOverride {
            url = replaceOrigin(of: url, with: origin)
        }

        var encoding = request.parameterEncoding
        let ownBody = request.requestBody
        // Each of `files` and `textPairs` walks the parameters and makes an array: once, and not
        // at all without parameters (most requests).
        let hasFiles = !parameters.isEmpty && !parameters.files.isEmpty
        if ownBody != nil {
            if hasFiles {
                throw BrickError(.invalidRequest, message: "file parameters cannot be sent with a body of your own")
            }
            encoding = .query
        } else if encoding == .automatic {
            if hasFiles {
                encoding = .multipart
            } else if method == .get || method == .head || method == .delete {
                encoding = .query
            } else {
                encoding = .formURLEncoded
            }
        }
        var body: RequestBody? = ownBody
        var contentType: String? = nil
        switch encoding {
        case .automatic, .query:
            if hasFiles {
                throw BrickError(.invalidRequest, message: "file parameters cannot be sent in a query string")
            }
            let query = parameters.isEmpty ? "" : PercentEncoding.form(parameters.textPairs)
            if !query.isEmpty {
                let (base, fragment) = split(url, at: "#")
                url = base + (base.contains("?") ? "&" : "?") + query + (fragment.map { "#" + $0 } ?? "")
            }
        case .formURLEncoded:
            if hasFiles {
                throw BrickError(.invalidRequest, message: "file parameters need multipart encoding")
            }
            body = .data(Data(PercentEncoding.form(parameters.textPairs).utf8))
            contentType = "application/x-www-form-urlencoded"
        case .multipart:
            let boundary = "BrickRequestBoundary" + UUID().uuidString.replacing("-", with: "")
            body = try MultipartEncoder.body(parameters, boundary: boundary)
            contentType = "multipart/form-data; boundary=\(boundary)"
        case .json:
            if hasFiles {
                throw BrickError(.invalidRequest, message: "file parameters cannot be sent in a JSON body")
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let declared = DeclaredJSONBody(request.jsonBody)
            if case .notEncodable(let declaredType) = declared {
                throw BrickError(
                    .invalidRequest,
                    message: "\(type(of: request)).jsonBody is a \(declaredType), which is not Encodable"
                )
            }
            do {
                if case .value(let value) = declared {
                    body = .data(try encoder.encode(value))
                } else {
                    var object: [String: String] = [:]
                    for (name, value) in parameters.textPairs { object[name] = value }
                    body = .data(try encoder.encode(object))
                }
            } catch {
                throw BrickError(.invalidRequest, message: "cannot encode the JSON body", underlying: error)
            }
            contentType = "application/json"
        }

        let headers = Self.headers(
            defaults: session.configuration.defaultHeaders,
            own: request.headers,
            contentType: contentType,
            idempotencyKey: request.idempotencyKey
        )

        let destination = request.responseDestination
        if case .file(let path) = destination, path.isEmpty {
            throw BrickError(
                .invalidRequest,
                message: "the response body file has no path (a download's destination must be a file URL)"
            )
        }
        var options = TransportRequest.Options(
            timeout: request.timeout,
            maxResponseSize: request.maxResponseSize,
            destination: destination,
            followsRedirects: request.followsRedirects,
            progress: progress
        )
        if let policy = request.egressPolicy {
            options.egressPolicy = policy
        } else if !forStorage, !session.configuration.egressPolicy.isUnrestricted {
            options.egressPolicy = session.configuration.egressPolicy
        }
        if case .file = destination {
            // A download that may be retried keeps what a failed attempt received, to continue it.
            options.keepsPartialDownload = request.autoRetryConfiguration.maxRetryCount > 0
        }
        do {
            return try TransportRequest(
                method: method,
                url: url,
                headers: headers,
                body: body,
                options: options
            )
        } catch {
            throw BrickError.transport(error)
        }
    }

    /// Session defaults, then the request's own (case-insensitive override), in a stable order.
    private static func headers(
        defaults: [String: String],
        own: [String: String],
        contentType: String?,
        idempotencyKey: String?
    ) -> [(name: String, value: String)] {
        if defaults.isEmpty && own.isEmpty && contentType == nil && idempotencyKey == nil { return [] }
        var merged: [String: (name: String, value: String)] = [:]
        for (name, value) in defaults { merged[name.lowercased()] = (name, value) }
        for (name, value) in own { merged[name.lowercased()] = (name, value) }
        if let contentType, merged["content-type"] == nil { merged["content-type"] = ("Content-Type", contentType) }
        if let idempotencyKey, merged["idempotency-key"] == nil {
            merged["idempotency-key"] = ("Idempotency-Key", idempotencyKey)
        }
        return merged.keys.sorted().map { merged[$0]! }
    }

    private static func split(_ text: String, at separator: Character) -> (String, String?) {
        guard let index = text.firstIndex(of: separator) else { return (text, nil) }
        return (String(text[..<index]), String(text[text.index(after: index)...]))
    }

    /// `https://api.example.com/users?x` with origin `http://127.0.0.1:8080` → `http://127.0.0.1:8080/users?x`.
    static func replaceOrigin(of url: String, with origin: String) -> String {
        guard let schemeEnd = url.firstRange(of: "://") else { return url }
        let rest = url[schemeEnd.upperBound...]
        let pathStart = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        let trimmedOrigin = origin.hasSuffix("/") ? String(origin.dropLast()) : origin
        return trimmedOrigin + rest[pathStart...]
    }
}

extension Session {
    /// Renders `endpoint` into the request this session would send, as `resume()` does, without
    /// sending it: for components that store requests (the offline queue).
    package func renderForStorage(_ endpoint: some RequestType) throws(BrickError) -> TransportRequest {
        try RequestRenderer.render(endpoint, session: self, forStorage: true)
    }
}
