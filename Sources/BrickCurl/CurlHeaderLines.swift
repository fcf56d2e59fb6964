@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The header lines handed to libcurl for a request, shared by the transfer and by
/// ``CurlTransport/cURLDescription(for:)`` so the description is exactly what is sent.
///
/// `Content-Length` is left to libcurl (it is checked against the body instead). A request with a
/// body gets an empty `Content-Type:` (suppressing libcurl's form default) unless it has one, and an
/// empty `Expect:` (no 100-continue round trip) unless it asks for one.
struct CurlHeaderLines {
    var lines: [String]
    var declaredLength: Int64?

    init(_ request: TransportRequest) throws(TransportError) {
        var lines: [String] = []
        let fields = request.headerFields
        if !fields.isEmpty { lines.reserveCapacity(fields.count + 2) }  // no allocation for no lines
        var hasContentType = false
        var hasExpect = false
        var declared: String? = nil
        for field in fields {
            switch field.name {
            case .contentLength:
                declared = field.value
                continue
            case .contentType: hasContentType = true
            case .expect: hasExpect = true
            default: break
            }
            lines.append(field.value.isEmpty ? "\(field.name.rawName);" : "\(field.name.rawName): \(field.value)")
        }
        let hasBody = request.body != nil || request.method == .post
        if hasBody && !hasContentType { lines.append("Content-Type:") }
        if request.body != nil && !hasExpect { lines.append("Expect:") }
        if let declared {
            guard let length = declared.decimalDigitsValue else {
                throw TransportError(.invalidRequest, message: "Content-Length is not a number")
            }
            if request.body == nil && length != 0 {
                throw TransportError(.invalidRequest, message: "Content-Length \(length) on a request without a body")
            }
            self.declaredLength = length
        } else {
            self.declaredLength = nil
        }
        self.lines = lines
    }
}
