@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// What a download to a file does with the final response's body, with no I/O: continue the
/// partial file, start it over, or refuse. The transfer asks at the body's first byte and applies
/// the answer; `ResumeDecisionTests` checks it row by row.
///
/// - Continuing (`resumeOffset > 0`, the request sent `Range` and `If-Range`): a `206` whose
///   `Content-Range` starts at the offset asked for is appended — unless it is content-encoded,
///   which cannot be spliced onto decoded bytes: refused (``TransportError/Kind/invalidResponse``).
///   Anything else (a `200` because the resource changed or ranges are not supported, an error
///   document) starts the file over.
/// - What a later attempt may continue from: a `200` with no content encoding and a strong `ETag`
///   (else its `Last-Modified`) gives the validator a retry sends in `If-Range`; otherwise none.
package enum ResumeDecision: Sendable, Hashable {
    /// Append to the partial file, from the offset asked for.
    case append
    /// Start the file over (truncate what is there when `truncate`); `validator` is what a later
    /// attempt could continue from, or `nil`.
    case startOver(truncate: Bool, validator: String?)
    /// Fail the transfer with ``TransportError/Kind/invalidResponse`` and this message.
    case refuse(String)

    /// The decision for a response.
    ///
    /// - Parameters:
    ///   - resumeOffset: Bytes already in the partial file the request asked to continue (0: none).
    ///   - status: The final response's status.
    ///   - contentRange: Its `Content-Range`.
    ///   - contentEncoding: Its `Content-Encoding`.
    ///   - entityTag: Its `ETag`.
    ///   - lastModified: Its `Last-Modified`.
    package static func decide(
        resumeOffset: Int64,
        status: Int,
        contentRange: String?,
        contentEncoding: String?,
        entityTag: String?,
        lastModified: String?
    ) -> ResumeDecision {
        let encoding = contentEncoding?.lowercased()
        let identity = encoding == nil || encoding == "identity"
        if resumeOffset > 0, status == 206, (contentRange ?? "").hasPrefix("bytes \(resumeOffset)-") {
            return identity ? .append : .refuse("the server continued the body content-encoded; it cannot be appended")
        }
        var validator: String? = nil
        if status == 200 && identity {
            if let entityTag, !entityTag.hasPrefix("W/"), !entityTag.isEmpty {
                validator = entityTag
            } else if let lastModified, !lastModified.isEmpty {
                validator = lastModified
            }
        }
        return .startOver(truncate: resumeOffset > 0, validator: validator)
    }
}
