import FoundationEssentials
import HTTPTypes

/// What is taken out of an exchange before it is kept, as VCR's `filter_sensitive_data` does:
///
/// - the values of credential header fields (`Authorization`, `Cookie`, … and those named);
/// - the values of named query parameters, in the URL and in URLs the headers carry (`Location`),
///   names compared percent-decoded and without regard to case (`?%74oken=` is `token`);
/// - the values of named JSON and form fields in either body (`password`, `access_token`, …);
/// - and then every value redacted anywhere in the exchange, wherever else it appears in that
///   exchange — a body that echoes the request (`/anything`, an error page), another header, the
///   URL — as it was, percent-encoded or JSON-escaped.
///
/// Each is replaced by `REDACTED`. A replay matches a recorded `REDACTED` against any value, so a
/// fixture works with the real secret and without it. Values shorter than 6 bytes are replaced
/// only where they were found (a 2-letter cookie value is not hunted through every body).
public struct HARRedaction: Sendable, Hashable {
    /// Header fields whose values are replaced, by lowercase name. Always at least
    /// `authorization`, `proxy-authorization`, `cookie` and `set-cookie`.
    public private(set) var headerNames: Set<String>
    /// Query parameters whose values are replaced, by lowercase name (compared percent-decoded):
    /// by default ``secretNames``, and those given.
    public var queryParameters: Set<String>
    /// JSON keys (at any depth) and form fields whose values are replaced in request and response
    /// bodies, by lowercase name: by default ``secretNames``, and those given.
    public var bodyFields: Set<String>

    /// The header fields always redacted.
    package static let credentialHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie", "set-cookie"]

    /// The parameter and field names redacted by default: `password`, `passwd`, `secret`,
    /// `client_secret`, `access_token`, `refresh_token`, `id_token`, `token`, `api_key`, `apikey`.
    public static let secretNames: Set<String> = [
        "password", "passwd", "secret", "client_secret", "access_token", "refresh_token", "id_token", "token", "api_key", "apikey",
    ]

    /// What is always redacted, and these besides.
    ///
    /// - Parameters:
    ///   - headers: More header names (a session's `sensitiveHeaders`, an `X-API-Key`); case does
    ///     not matter. A session's own `sensitiveHeaders` are added by `withReplay` and the
    ///     `.replay` trait.
    ///   - queryParameters: More query parameter names (`signature`), besides ``secretNames``.
    ///   - bodyFields: More JSON and form field names (`pin`, `ssn`), besides ``secretNames``.
    public init(headers: Set<String> = [], queryParameters: Set<String> = [], bodyFields: Set<String> = []) {
        headerNames = Self.credentialHeaders.union(headers.map { $0.lowercased() })
        self.queryParameters = Self.secretNames.union(queryParameters.map { $0.lowercased() })
        self.bodyFields = Self.secretNames.union(bodyFields.map { $0.lowercased() })
    }

    /// This redaction with more header names (a session's `sensitiveHeaders`).
    package func adding(headers: Set<String>) -> HARRedaction {
        var redaction = self
        redaction.headerNames.formUnion(headers.map { $0.lowercased() })
        return redaction
    }

    /// The text that replaces a redacted value.
    package static let placeholder = "REDACTED"

    /// Header fields whose values are URLs (their query parameters are redacted as the URL's).
    static let urlFields: Set<String> = ["location", "content-location", "referer"]

    /// `fields` with the values of redacted fields replaced.
    package func redact(_ fields: HTTPFields) -> HTTPFields {
        var secrets = Secrets()
        return redact(fields, collecting: &secrets)
    }

    /// `url` without credentials in its authority and with redacted query parameters' values replaced.
    package func redact(url: String) -> String {
        var secrets = Secrets()
        return redact(url: url, collecting: &secrets)
    }

    /// `exchange` redacted: fields, URL, bodies, then every redacted value wherever else it
    /// appears in the exchange.
    package func redact(_ exchange: HARExchange) -> HARExchange {
        var secrets = Secrets()
        var redacted = exchange
        redacted.requestHeaders = redact(exchange.requestHeaders, collecting: &secrets)
        redacted.url = redact(url: exchange.url, collecting: &secrets)
        if let response = exchange.response {
            redacted.response = HTTPResponse(status: response.status, headerFields: redact(response.headerFields, collecting: &secrets))
        }
        redacted.requestBody = exchange.requestBody.map {
            redact(body: $0, contentType: exchange.requestHeaders[.contentType], collecting: &secrets)
        }
        redacted.responseBody = redact(
            body: exchange.responseBody, contentType: exchange.response?.headerFields[.contentType], collecting: &secrets
        )
        guard !secrets.isEmpty else { return redacted }
        let needles = secrets.needles
        redacted.url = Secrets.replace(needles, in: redacted.url)
        redacted.requestHeaders = Secrets.replace(needles, in: redacted.requestHeaders)
        if let response = redacted.response {
            redacted.response = HTTPResponse(status: response.status, headerFields: Secrets.replace(needles, in: response.headerFields))
        }
        redacted.requestBody = redacted.requestBody.map { Secrets.replace(needles, in: $0) }
        redacted.responseBody = Secrets.replace(needles, in: redacted.responseBody)
        return redacted
    }

    func redact(_ fields: HTTPFields, collecting secrets: inout Secrets) -> HTTPFields {
        guard fields.contains(where: { headerNames.contains($0.name.canonicalName) || Self.urlFields.contains($0.name.canonicalName) }) else {
            return fields
        }
        var redacted = HTTPFields()
        for field in fields {
            let name = field.name.canonicalName
            if headerNames.contains(name) {
                secrets.addCredential(field.value, field: name)
                redacted.append(HTTPField(name: field.name, value: Self.placeholder))
            } else if Self.urlFields.contains(name) {
                redacted.append(HTTPField(name: field.name, value: redact(url: field.value, collecting: &secrets)))
            } else {
                redacted.append(field)
            }
        }
        return redacted
    }

    func redact(url: String, collecting secrets: inout Secrets) -> String {
        var url = url
        if let schemeEnd = url.firstRange(of: "://") {
            let authorityEnd = url[schemeEnd.upperBound...].firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? url.endIndex
            if let at = url[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@") {
                let userInfo = url[schemeEnd.upperBound..<at]
                if let colon = userInfo.firstIndex(of: ":") { secrets.add(String(userInfo[userInfo.index(after: colon)...])) }
                url.removeSubrange(schemeEnd.upperBound...at)
            }
        }
        guard !queryParameters.isEmpty, let question = url.firstIndex(of: "?") else { return url }
        let query = url[url.index(after: question)...]
        let fragmentStart = query.firstIndex(of: "#") ?? query.endIndex
        let pairs = FormFields.redact(String(query[..<fragmentStart]), names: queryParameters, collecting: &secrets)
        return String(url[...question]) + pairs + String(query[fragmentStart...])
    }

    /// `body` with the values of ``bodyFields`` replaced, when it is JSON or a form.
    func redact(body: Data, contentType: String?, collecting secrets: inout Secrets) -> Data {
        guard !bodyFields.isEmpty, !body.isEmpty else { return body }
        let type = contentType?.lowercased() ?? ""
        if type.contains("x-www-form-urlencoded") {
            let text = String(decoding: body, as: UTF8.self)
            return Data(FormFields.redact(text, names: bodyFields, collecting: &secrets).utf8)
        }
        let first = body.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        if type.contains("json") || first == UInt8(ascii: "{") || first == UInt8(ascii: "[") {
            return JSONFields.redact(body, names: bodyFields, collecting: &secrets)
        }
        return body
    }
}
