import FoundationEssentials
import Glibc

/// Which responses count as successful before serialization.
public struct ResponseValidation: Sendable, Hashable {
    /// Accepted status codes.
    public var statusCodes: Range<Int>
    /// Accepted media types (`type/subtype`, `type/*` or `*/*`), or `nil` for any.
    public var contentTypes: [String]?

    /// Creates a validation.
    ///
    /// - Parameters:
    ///   - statusCodes: Accepted status codes; default `200..<300`.
    ///   - contentTypes: Accepted media types, or `nil` for any.
    public init(statusCodes: Range<Int> = 200..<300, contentTypes: [String]? = nil) {
        self.statusCodes = statusCodes
        self.contentTypes = contentTypes
    }

    /// Checks a response.
    ///
    /// - Parameter response: The response.
    /// - Throws: ``BrickError`` with code ``BrickError/Code/unacceptableStatusCode`` or
    ///   ``BrickError/Code/unacceptableContentType``, keeping the status and body.
    public func validate(_ response: TransportResponse) throws(BrickError) {
        guard statusCodes.contains(response.status.code) else {
            throw BrickError(
                .unacceptableStatusCode,
                message:
                    "status \(response.status.code) is not in \(statusCodes.lowerBound)..<\(statusCodes.upperBound)",
                status: response.status,
                responseBody: response.body
            )
        }
        // An empty body has no content type to check; a body written to a file has one.
        guard let contentTypes, !(response.body?.isEmpty ?? true) || Self.isNonEmptyFile(response.bodyFile) else {
            return
        }
        let received =
            (response.headerFields[.contentType] ?? "").split(separator: ";").first
            .map { $0.trimmingSpacesAndTabs().lowercased() } ?? ""
        let accepted = contentTypes.contains { pattern in
            let pattern = pattern.lowercased()
            if pattern == "*/*" || pattern == received { return true }
            if pattern.hasSuffix("/*") { return received.hasPrefix(pattern.dropLast()) }
            return false
        }
        guard accepted else {
            throw BrickError(
                .unacceptableContentType,
                message:
                    "content type \(received.isEmpty ? "(none)" : received) is not one of \(contentTypes.joined(separator: ", "))",
                status: response.status,
                responseBody: response.body
            )
        }
    }

    private static func isNonEmptyFile(_ path: String?) -> Bool {
        guard let path else { return false }
        var info = stat()
        return stat(path, &info) == 0 && info.st_size > 0
    }
}
