import HTTPTypes

/// What is taken out of an exchange before it is kept: the values of credential header fields
/// and of named query parameters, replaced by `REDACTED`. A replay matches a recorded `REDACTED`
/// against any value, so a fixture works with the real secret and without it.
public struct HARRedaction: Sendable, Hashable {
    /// Header fields whose values are replaced, by lowercase name. Always at least
    /// `authorization`, `proxy-authorization`, `cookie` and `set-cookie`.
    public private(set) var headerNames: Set<String>
    /// Query parameters whose values are replaced, by exact name.
    public var queryParameters: Set<String>

    /// The header fields always redacted.
    package static let credentialHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie", "set-cookie"]

    /// What is always redacted, and these besides.
    ///
    /// - Parameters:
    ///   - headers: More header names (a session's `sensitiveHeaders`, an `X-API-Key`); case does
    ///     not matter.
    ///   - queryParameters: Query parameter names (`api_key`, `signature`).
    public init(headers: Set<String> = [], queryParameters: Set<String> = []) {
        headerNames = Self.credentialHeaders.union(headers.map { $0.lowercased() })
        self.queryParameters = queryParameters
    }

    /// The text that replaces a redacted value.
    package static let placeholder = "REDACTED"

    /// `fields` with the values of redacted fields replaced.
    package func redact(_ fields: HTTPFields) -> HTTPFields {
        guard fields.contains(where: { headerNames.contains($0.name.canonicalName) }) else { return fields }
        var redacted = HTTPFields()
        for field in fields {
            redacted.append(
                headerNames.contains(field.name.canonicalName) ? HTTPField(name: field.name, value: Self.placeholder) : field
            )
        }
        return redacted
    }

    /// `url` without credentials in its authority and with redacted query parameters' values replaced.
    package func redact(url: String) -> String {
        var url = url
        if let schemeEnd = url.firstRange(of: "://") {
            let authorityEnd = url[schemeEnd.upperBound...].firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? url.endIndex
            if let at = url[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@") {
                url.removeSubrange(schemeEnd.upperBound...at)
            }
        }
        guard !queryParameters.isEmpty, let question = url.firstIndex(of: "?") else { return url }
        let query = url[url.index(after: question)...]
        let fragmentStart = query.firstIndex(of: "#") ?? query.endIndex
        let pairs = query[..<fragmentStart].split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            let name = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return queryParameters.contains(String(name)) ? "\(name)=\(Self.placeholder)" : String(pair)
        }
        return String(url[...question]) + pairs.joined(separator: "&") + String(query[fragmentStart...])
    }
}
