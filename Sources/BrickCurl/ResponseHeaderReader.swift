import BrickRequestCore

/// Reads a response's header lines one at a time, as libcurl hands them over (status line,
/// fields, blank line; again for each interim `1xx` block and each redirect hop): where the block
/// stands, how large it has grown and the `Content-Length` it announced. A pure decision, no I/O:
/// the transfer acts on what each line is (``Line``), and the fuzzer drives it with any bytes.
package struct ResponseHeaderReader: Sendable {
    /// Where a hop's header block stands: a status line is expected only first (and after a
    /// complete interim `1xx` block); the block is complete at its blank line.
    package enum State: Sendable, Hashable { case awaitingStatusLine, inFields, complete }

    /// What a line is, and what the transfer does with it.
    package enum Line: Sendable, Hashable {
        /// A status line: a new block starts (the fields read so far are dropped); not kept.
        case statusLine
        /// A field line, or the blank line that ends the block: kept.
        case field
        /// The block passed ``maxBytes``: the transfer fails.
        case tooLarge
        /// A second `Content-Length` with another value (RFC 9112 §6.3): the transfer fails.
        case conflictingLength
    }

    /// The most bytes of one header block (libcurl's own cap, 300 KB in 7.88, fails with a result
    /// code that looks like a lost connection).
    package static let maxBytes = 256 * 1024

    /// Where the block stands.
    package private(set) var state = State.awaitingStatusLine
    /// Bytes of the current block so far.
    package private(set) var bytes = 0
    /// The block's `Content-Length`, -1 when none was sent, -2 when it is not a number.
    package private(set) var contentLength: Int64 = -1

    /// A reader before a hop's first line.
    package init() {}

    /// Reads one line (with its line ending).
    ///
    /// - Parameters:
    ///   - line: The line's bytes.
    ///   - bodyStarted: Whether body bytes of this hop have arrived (a line then is a trailer).
    /// - Returns: What the line is.
    @inline(__always)
    package mutating func read(_ line: UnsafeBufferPointer<UInt8>, bodyStarted: Bool) -> Line {
        let count = line.count
        // A status line starts a new header block (1xx interim responses, or the final one); a
        // field line that happens to start with `HTTP/` is a field.
        if state != .inFields && !bodyStarted, count >= 5, let base = line.baseAddress,
            UInt32(littleEndian: UnsafeRawPointer(base).loadUnaligned(as: UInt32.self)) == Self.httpWord,
            line[4] == UInt8(ascii: "/")
        {
            contentLength = -1
            state = .inFields
            bytes = count
            return .statusLine
        }
        if state == .inFields {
            bytes += count
            if bytes > Self.maxBytes { return .tooLarge }
            // The blank line that ends the block.
            if count <= 2 && (line[0] == 0x0A || (line[0] == 0x0D && count == 2 && line[1] == 0x0A)) {
                state = .complete
            }
        }
        if count > 15 && line[0] | 0x20 == UInt8(ascii: "c"), let length = Self.contentLengthValue(line) {
            // A length that is not a number (-2) conflicts with any number that follows it too.
            if contentLength != -1 && contentLength != length { return .conflictingLength }
            contentLength = length
        }
        return .field
    }

    /// `HTTP` as a little-endian word.
    private static let httpWord: UInt32 = 0x5054_5448
    /// `content-` and `-length:` (the name's bytes 0..<8 and 7..<15) as little-endian words.
    private static let contentWord: UInt64 = 0x2d74_6e65_746e_6f63
    private static let lengthWord: UInt64 = 0x3a68_7467_6e65_6c2d

    /// The value of a `Content-Length` line, -2 when it is not a number, `nil` for another field.
    /// A value too large for `Int64` is not a number either.
    package static func contentLengthValue(_ line: UnsafeBufferPointer<UInt8>) -> Int64? {
        let nameCount = 15  // "content-length:"
        guard line.count > nameCount, let base = line.baseAddress else { return nil }
        // Two word compares; `|0x20` lower-cases letters and leaves '-' and ':' unchanged.
        let raw = UnsafeRawPointer(base)
        let lower: UInt64 = 0x2020_2020_2020_2020
        guard UInt64(littleEndian: raw.loadUnaligned(as: UInt64.self)) | lower == contentWord,
            UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 7, as: UInt64.self)) | lower == lengthWord
        else { return nil }
        var value: Int64 = 0
        var digits = 0
        for index in nameCount..<line.count {
            let byte = line[index]
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
                if overflow1 || overflow2 { return -2 }
                value = sum
                digits += 1
            case 0x20, 0x09, 0x0D, 0x0A:
                continue
            default:
                return -2  // not a number: never equal to a real length, so a second field conflicts
            }
        }
        return digits > 0 ? value : -2
    }
}
