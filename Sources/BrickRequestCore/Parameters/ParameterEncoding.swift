import FoundationEssentials

/// How a request's parameters are encoded.
public enum ParameterEncoding: Sendable, Hashable {
    /// Query for `GET`, `HEAD` and `DELETE`; `application/x-www-form-urlencoded` body otherwise;
    /// `multipart/form-data` as soon as a file is present. The default.
    case automatic
    /// Always in the query string.
    case query
    /// An `application/x-www-form-urlencoded` body.
    case formURLEncoded
    /// A `multipart/form-data` body (files streamed from disk).
    case multipart
    /// A JSON body (``JSONBodyRequestType``).
    case json
}

/// RFC 3986 percent-encoding: everything but unreserved characters (`A–Z a–z 0–9 - . _ ~`).
enum PercentEncoding {
    static func encode(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += "%"
                output += String(byte >> 4, radix: 16, uppercase: true)
                output += String(byte & 0x0F, radix: 16, uppercase: true)
            }
        }
        return output
    }

    static func form(_ pairs: [(name: String, value: String)]) -> String {
        if pairs.isEmpty { return "" }
        return pairs.map { encode($0.name) + "=" + encode($0.value) }.joined(separator: "&")
    }
}

/// Builds a streamed `multipart/form-data` body: text parts and part headers in memory, file parts
/// read from disk while sending.
enum MultipartEncoder {
    /// - Throws: ``BrickError/Code/invalidRequest`` when a file's media type holds CR, LF or NUL
    ///   (it is written into the part's header as it is, unlike names, which are escaped).
    static func body(_ parameters: ParameterBuilder, boundary: String) throws(BrickError) -> RequestBody {
        var segments: [RequestBody.Segment] = []
        var pending = Data()
        func flush() {
            if !pending.isEmpty {
                segments.append(.data(pending))
                pending = Data()
            }
        }
        for entry in parameters.entries {
            switch entry {
            case .text(let name, let value?):
                pending.append(contentsOf: "--\(boundary)\r\n".utf8)
                pending.append(contentsOf: "Content-Disposition: form-data; name=\"\(quoted(name))\"\r\n\r\n".utf8)
                pending.append(contentsOf: value.utf8)
                pending.append(contentsOf: "\r\n".utf8)
            case .text(_, nil):
                continue
            case .file(let file):
                if file.mimeType.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }) {
                    throw BrickError(
                        .invalidRequest,
                        message: "file parameter \(file.name.debugDescription) has a media type containing CR, LF or NUL "
                            + "(header injection)"
                    )
                }
                pending.append(contentsOf: "--\(boundary)\r\n".utf8)
                pending.append(
                    contentsOf:
                        "Content-Disposition: form-data; name=\"\(quoted(file.name))\"; filename=\"\(quoted(file.fileName))\"\r\n"
                        .utf8
                )
                pending.append(contentsOf: "Content-Type: \(file.mimeType)\r\n\r\n".utf8)
                switch file.source {
                case .data(let data):
                    pending.append(data)
                case .file(let path):
                    flush()
                    segments.append(.file(path: path))
                }
                pending.append(contentsOf: "\r\n".utf8)
            }
        }
        pending.append(contentsOf: "--\(boundary)--\r\n".utf8)
        flush()
        return RequestBody(segments: segments)
    }

    /// Quotes a name for `Content-Disposition` (RFC 7578 §4.2: escape `"` and drop CR/LF).
    private static func quoted(_ text: String) -> String {
        text.replacing("\"", with: "%22").replacing("\r", with: "%0D").replacing("\n", with: "%0A")
    }
}
