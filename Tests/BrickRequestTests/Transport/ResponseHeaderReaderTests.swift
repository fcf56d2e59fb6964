import BrickRequest
import HTTPTypes
import Testing

@Suite("Response header lines and netlink datagrams, read without I/O (tables)", .timeLimit(.minutes(3)))
struct ResponseHeaderReaderTests {
    typealias Line = ResponseHeaderReader.Line

    /// Lines as libcurl hands them over, what each is, and the block's Content-Length after them.
    static let blocks: [(name: String, lines: [String], verdicts: [Line], contentLength: Int64)] = [
        ("a plain response", ["HTTP/1.1 200 OK\r\n", "Content-Length: 12\r\n", "\r\n"],
         [.statusLine, .field, .field], 12),
        ("an interim block, then the final one (only its length counts)",
         ["HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 200 OK\r\n", "content-length: 3\n", "\n"],
         [.statusLine, .field, .statusLine, .field, .field], 3),
        ("a field that starts with HTTP/ is a field", ["HTTP/1.1 200 OK\r\n", "HTTP/2 200\r\n", "\r\n"],
         [.statusLine, .field, .field], -1),
        ("two equal lengths agree", ["HTTP/1.1 200 OK\r\n", "Content-Length: 5\r\n", "CONTENT-LENGTH:5\r\n"],
         [.statusLine, .field, .field], 5),
        ("two different lengths conflict", ["HTTP/1.1 200 OK\r\n", "Content-Length: 5\r\n", "Content-Length: 6\r\n"],
         [.statusLine, .field, .conflictingLength], 5),
        ("a length that is not a number", ["HTTP/1.1 200 OK\r\n", "Content-Length: 5x\r\n"],
         [.statusLine, .field], -2),
        // Found while writing the fuzz target: 20 digits used to wrap around to another Int64 (this one).
        ("a length past Int64 is not a number, and conflicts with a real one",
         ["HTTP/1.1 200 OK\r\n", "Content-Length: 99999999999999999999\r\n", "Content-Length: 7766279631452241919\r\n"],
         [.statusLine, .field, .conflictingLength], -2),
        ("the largest Int64 is a number", ["HTTP/1.1 200 OK\r\n", "Content-Length: 9223372036854775807\r\n"],
         [.statusLine, .field], Int64.max),
    ]

    @Test("every block", arguments: blocks.indices)
    func block(_ index: Int) {
        let row = Self.blocks[index]
        var reader = ResponseHeaderReader()
        var verdicts: [Line] = []
        for line in row.lines {
            let bytes = Array(line.utf8)
            verdicts.append(bytes.withUnsafeBufferPointer { reader.read($0, bodyStarted: false) })
        }
        #expect(verdicts == row.verdicts, "\(row.name)")
        #expect(reader.contentLength == row.contentLength, "\(row.name)")
    }

    @Test("a block grows to 256 KiB and no further; a status line after the body is a trailer")
    func limits() {
        var reader = ResponseHeaderReader()
        let status = Array("HTTP/1.1 200 OK\r\n".utf8)
        #expect(status.withUnsafeBufferPointer { reader.read($0, bodyStarted: false) } == .statusLine)
        let field = Array(("X-Filler: " + String(repeating: "a", count: 1000) + "\r\n").utf8)
        var verdict = Line.field
        var lines = 0
        while verdict == .field {
            verdict = field.withUnsafeBufferPointer { reader.read($0, bodyStarted: false) }
            lines += 1
        }
        #expect(verdict == .tooLarge)
        #expect(lines == (ResponseHeaderReader.maxBytes - status.count) / field.count + 1)
        var trailer = ResponseHeaderReader()
        #expect(status.withUnsafeBufferPointer { trailer.read($0, bodyStarted: true) } == .field)
        #expect(trailer.state == .awaitingStatusLine)
    }

    /// Found by fuzzing (Tests/Fuzz/Corpus/response-headers/nul-bytes-in-value.bin): NUL bytes
    /// around a value became spaces that the value kept, so a stored header block read back
    /// different fields than the response had.
    @Test("control bytes around a field value are trimmed like spaces; the fields read back the same once written out")
    func controlBytesTrimmed() {
        let raw = Array("Content-Type: text/plain\r\nContent-Length: \u{0}\u{0}\u{0}A\r\nX-Tail: b\u{7F}\u{1}\r\n".utf8)
        let fields = CachedResponse.headerFields(fromRaw: raw)
        #expect(fields[.contentLength] == "A")
        #expect(fields[HTTPField.Name("X-Tail")!] == "b")
        #expect(CachedResponse.headerFields(fromRaw: fields.rawHeaderBytes) == fields)
    }

    /// A netlink message: header (length, type, flags, sequence, port) and payload.
    static func message(type: UInt16, flags: UInt16 = 0, sequence: UInt32, payload: [UInt8], length: UInt32? = nil) -> [UInt8] {
        var bytes: [UInt8] = []
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        append(length ?? UInt32(16 + payload.count))
        append(type)
        append(flags)
        append(sequence)
        append(UInt32(0))
        bytes += payload
        while bytes.count % 4 != 0 { bytes.append(0) }
        return bytes
    }

    @Test("netlink: replies of the request's sequence, multipart until DONE, other sequences skipped")
    func netlinkMultipart() {
        let multi: UInt16 = 2  // NLM_F_MULTI
        let datagram = Self.message(type: 24, flags: multi, sequence: 7, payload: [1, 2, 3])
            + Self.message(type: 24, flags: multi, sequence: 6, payload: [9])
            + Self.message(type: 24, flags: multi, sequence: 7, payload: [4, 5, 6, 7])
        var replies: [NetlinkMessages.Reply] = []
        let done = datagram.withUnsafeBytes { NetlinkMessages.read($0, sequence: 7, into: &replies) }
        #expect(!done)
        #expect(replies.map(\.payload) == [[1, 2, 3], [4, 5, 6, 7]])
        let end = Self.message(type: 3, flags: multi, sequence: 7, payload: [0, 0, 0, 0])
        #expect(end.withUnsafeBytes { NetlinkMessages.read($0, sequence: 7, into: &replies) })
        #expect(replies.count == 2)
    }

    @Test("netlink: an error message too short for its code ends the reply as a failure; impossible lengths end the datagram")
    func netlinkDamaged() {
        var replies: [NetlinkMessages.Reply] = []
        // NLMSG_ERROR with no room for the error code: never read past the datagram.
        let truncated = Self.message(type: 2, sequence: 1, payload: [])
        #expect(truncated.withUnsafeBytes { NetlinkMessages.read($0, sequence: 1, into: &replies) })
        #expect(replies.count == 1 && replies[0].error != 0)
        replies.removeAll()
        for length: UInt32 in [0, 15, 1000, UInt32.max] {
            let lying = Self.message(type: 24, sequence: 1, payload: [1, 2, 3, 4], length: length)
            #expect(!lying.withUnsafeBytes { NetlinkMessages.read($0, sequence: 1, into: &replies) })
        }
        #expect(replies.isEmpty)
    }
}
