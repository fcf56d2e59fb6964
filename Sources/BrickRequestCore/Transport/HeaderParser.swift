import HTTPTypes

/// Parses a raw header block (`Name: value` lines, CRLF or LF) into `HTTPFields`, leniently: lines
/// that are not valid fields are skipped.
package enum HeaderParser {
    package static func fields(from raw: [UInt8]) -> HTTPFields {
        // Gathered in an array and handed over at once: `HTTPFields.append` goes through a generic
        // `replaceSubrange` per field that the compiler cannot specialize across modules.
        var fields: [HTTPField] = []
        raw.withUnsafeBufferPointer { buffer in
            var lineStart = 0
            let count = buffer.count
            while lineStart < count {
                var lineEnd = lineStart
                while lineEnd < count && buffer[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
                var end = lineEnd
                if end > lineStart && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                if let colon = buffer[lineStart..<end].firstIndex(of: UInt8(ascii: ":")) {
                    let nameBytes = UnsafeBufferPointer(rebasing: buffer[lineStart..<colon])
                    // Trimmed of whitespace and of control bytes, which the lenient value would turn
                    // into spaces (a value must read back the same once written out: found by fuzzing).
                    var valueStart = colon + 1
                    while valueStart < end && Self.isTrimmed(buffer[valueStart]) { valueStart += 1 }
                    var valueEnd = end
                    while valueEnd > valueStart && Self.isTrimmed(buffer[valueEnd - 1]) { valueEnd -= 1 }
                    if let name = HTTPField.Name(String(decoding: nameBytes, as: UTF8.self)) {
                        fields.append(
                            HTTPField(
                                name: name,
                                lenientValue: UnsafeBufferPointer(rebasing: buffer[valueStart..<valueEnd])
                            )
                        )
                    }
                }
                lineStart = lineEnd + 1
            }
        }
        return HTTPFields(fields)
    }

    /// Space, tab and the control bytes a field value may not hold (NUL, CR, DEL…).
    @inline(__always)
    private static func isTrimmed(_ byte: UInt8) -> Bool { byte <= 0x20 || byte == 0x7F }
}

extension HTTPFields {
    /// The fields as a raw header block: `Name: value\r\n` lines, what ``HeaderParser`` reads back.
    package var rawHeaderBytes: [UInt8] {
        var raw: [UInt8] = []
        for field in self {
            raw.append(contentsOf: field.name.rawName.utf8)
            raw.append(contentsOf: ": ".utf8)
            raw.append(contentsOf: field.value.utf8)
            raw.append(contentsOf: "\r\n".utf8)
        }
        return raw
    }
}
