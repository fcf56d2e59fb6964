import BrickOffline
import BrickRequest
import Foundation
import HTTPTypes

/// One entry point per parser. Each takes any bytes, must not crash, and checks what must hold
/// for every input (a failed `check` is a finding, as a crash is): a value the parser accepted
/// writes out and reads back the same; a stream parsed in pieces gives what it gives whole.
enum FuzzTargets {
    typealias Target = @Sendable (UnsafeRawBufferPointer) -> Void

    static let named: [String: Target] = [
        "json": json,
        "sse": serverSentEvents,
        "response-headers": responseHeaders,
        "url": urlAndHeaders,
        "retry-after": retryAfter,
        "cache-headers": cacheHeaders,
        "stored-request": storedRequest,
        "netlink": netlink,
    ]

    /// The target this process runs: set once by main before libFuzzer starts, read only after
    /// (libFuzzer calls back on the thread that started it), so no lock is needed.
    nonisolated(unsafe) static var selected: Target?

    /// A finding: stops the fuzzer with the input saved, as a crash would.
    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition { fatalError("fuzz check failed: \(message())") }
    }

    // MARK: - JSON (a response body)

    /// Any bytes as a JSON body; what is accepted prints as JSON that parses back to itself.
    static func json(_ input: UnsafeRawBufferPointer) {
        guard let value = try? JSON(data: Data(input)) else { return }
        let text = value.description
        guard let again = try? JSON(data: Data(text.utf8)) else {
            check(false, "an accepted value prints as text that does not parse: \(text)")
            return
        }
        check(again == value, "an accepted value does not read back the same: \(text)")
    }

    // MARK: - Server-sent events (a streamed body)

    /// Any bytes as an event stream, parsed whole, in two pieces (cut where the first byte says)
    /// and, for short inputs, a byte at a time: the events, the last ID and the retry time agree.
    static func serverSentEvents(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        var whole = ServerSentEventParser(maxEventSize: 4096)
        let expected = whole.parse(bytes)
        let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % bytes.count
        var pieces = ServerSentEventParser(maxEventSize: 4096)
        let events = pieces.parse(bytes[..<cut]) + pieces.parse(bytes[cut...])
        check(events == expected, "events differ when the stream is cut at \(cut)")
        check(pieces.lastEventID == whole.lastEventID, "last event ID differs when cut at \(cut)")
        check(pieces.reconnectionTime == whole.reconnectionTime, "retry differs when cut at \(cut)")
        check(pieces.exceededLimit == whole.exceededLimit, "limit differs when cut at \(cut)")
        if bytes.count <= 512 {
            var single = ServerSentEventParser(maxEventSize: 4096)
            var events: [ServerSentEvent] = []
            for byte in bytes { events += single.parse(CollectionOfOne(byte)) }
            check(events == expected, "events differ when the stream comes a byte at a time")
        }
    }

    // MARK: - Response header lines (what libcurl hands the header callback)

    /// Any bytes as what a server sends before the body, cut into lines at each LF as libcurl
    /// does: the reader's verdicts hold their limits, and the kept block's fields write out and
    /// read back the same.
    static func responseHeaders(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        var reader = ResponseHeaderReader()
        var block: [UInt8] = []
        var stopped = false
        bytes.withUnsafeBufferPointer { buffer in
            var start = 0
            while start < buffer.count && !stopped {
                var end = start
                while end < buffer.count && buffer[end] != 0x0A { end += 1 }
                end = min(end + 1, buffer.count)
                let line = UnsafeBufferPointer(rebasing: buffer[start..<end])
                switch reader.read(line, bodyStarted: false) {
                case .statusLine:
                    check(reader.state == .inFields, "a status line did not start a block")
                    block.removeAll()
                case .field:
                    block.append(contentsOf: line)
                case .tooLarge:
                    check(reader.bytes > ResponseHeaderReader.maxBytes, "too large at \(reader.bytes) bytes")
                    stopped = true
                case .conflictingLength:
                    stopped = true
                }
                if !stopped {
                    check(reader.bytes <= ResponseHeaderReader.maxBytes, "a block past the limit was kept")
                }
                start = end
            }
        }
        check(reader.contentLength >= -2, "Content-Length \(reader.contentLength)")
        let fields = CachedResponse.headerFields(fromRaw: block)
        let again = CachedResponse.headerFields(fromRaw: fields.rawHeaderBytes)
        check(again == fields, "header fields do not read back the same")
    }

    // MARK: - Request URL and header fields (what a caller or a stored entry hands us)

    /// Any bytes as `url \n name \n value`: what is accepted has a canonical URL that is accepted
    /// as itself, and no byte of header injection anywhere.
    static func urlAndHeaders(_ input: UnsafeRawBufferPointer) {
        let parts = input.split(separator: 0x0A, maxSplits: 2, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        let url = parts[0]
        let headers = parts.count == 3 ? [(name: parts[1], value: parts[2])] : []
        guard let request = try? TransportRequest(method: .post, url: url, headers: headers) else { return }
        let canonical = request.urlString
        check(
            !canonical.utf8.contains { $0 <= 0x20 || $0 >= 0x7F },
            "a canonical URL with a space, control or non-ASCII byte: \(canonical.debugDescription)"
        )
        check(canonical.hasPrefix("http://") || canonical.hasPrefix("https://"), "scheme of \(canonical)")
        guard let again = try? TransportRequest(method: .post, url: canonical, headers: headers) else {
            check(false, "the canonical form \(canonical.debugDescription) of an accepted URL is refused")
            return
        }
        check(again.urlString == canonical, "the canonical form is not its own canonical form")
        for field in request.headerFields {
            check(
                !field.value.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 },
                "an accepted header value carries CR, LF or NUL"
            )
        }
    }

    // MARK: - Retry-After

    /// Any bytes as a `Retry-After` value: a delay is never negative and never grows as time
    /// passes (a minute later, within the same year: RFC 850's two-digit year is read relative to
    /// the current one).
    static func retryAfter(_ input: UnsafeRawBufferPointer) {
        let value = String(decoding: input, as: UTF8.self)
        let now = Date(timeIntervalSince1970: 1_780_000_000)
        guard let delay = RetryAfterParsing.delay(value, now: now) else { return }
        check(delay >= .zero, "negative delay \(delay) for \(value.debugDescription)")
        let later = RetryAfterParsing.delay(value, now: now.addingTimeInterval(60))
        check(later.map { $0 <= delay } ?? false, "a delay grows as time passes: \(value.debugDescription)")
    }

    // MARK: - A stored response's header block (the cache's file, or the server)

    /// Any bytes as a cached response's stored header block: the facts the cache rules read from
    /// it stay in range (no negative lifetime or age, age grows with time) and the cache-control
    /// directives parse.
    static func cacheHeaders(_ input: UnsafeRawBufferPointer) {
        let fields = CachedResponse.headerFields(fromRaw: Array(input))
        let requested = Date(timeIntervalSince1970: 1_780_000_000)
        let facts = StoredResponseFacts(
            status: 200,
            fields: fields,
            requestTime: requested,
            responseTime: requested.addingTimeInterval(0.25)
        )
        check(facts.lifetime >= .zero, "negative lifetime \(facts.lifetime)")
        check(facts.initialAge >= .zero, "negative age \(facts.initialAge)")
        let soon = facts.age(at: requested.addingTimeInterval(60))
        let later = facts.age(at: requested.addingTimeInterval(86_400))
        check(soon >= facts.initialAge && later >= soon, "age does not grow: \(facts.initialAge) \(soon) \(later)")
        _ = CacheControl(fields)
        _ = StoredResponseFacts.varyNames(in: fields)
    }

    // MARK: - An offline entry's payload (a row written by an older or damaged build)

    /// Any bytes as an entry's stored payload: decoding either fails with an error or gives a
    /// request that, stored again, decodes to the same request.
    static func storedRequest(_ input: UnsafeRawBufferPointer) {
        guard let stored = try? StoredRequest.decoded(Data(input)) else { return }
        guard let request = try? stored.transportRequest(idempotencyKey: "fuzz", credential: [:]) else { return }
        guard let restored = try? StoredRequest(request, sensitiveHeaders: []) else { return }
        guard let payload = try? restored.encoded(), let again = try? StoredRequest.decoded(payload) else {
            check(false, "a request read from a payload cannot be stored again")
            return
        }
        check(again == restored, "a stored request does not read back the same")
    }

    // MARK: - Netlink (what the kernel answers a route dump with)

    /// Any bytes as one netlink datagram answering a route dump: the replies lie inside the
    /// datagram, and each route message's attributes are read without leaving its payload.
    static func netlink(_ input: UnsafeRawBufferPointer) {
        // The sequence of the first message, so that the reader takes the datagram's replies.
        let sequence = input.count >= 12 ? input.loadUnaligned(fromByteOffset: 8, as: UInt32.self) : 0
        var replies: [NetlinkMessages.Reply] = []
        _ = NetlinkMessages.read(input, sequence: sequence, into: &replies)
        check(replies.reduce(0) { $0 + $1.payload.count + 16 } <= input.count, "replies larger than the datagram")
        let newRoute: UInt16 = 24  // RTM_NEWROUTE
        for reply in replies where reply.type == newRoute {
            _ = RouteFingerprint.route(from: reply.payload, usable: [1, 2])
        }
    }
}

/// libFuzzer's entry point by name (its runtime refers to it even when driven through
/// `LLVMFuzzerRunDriver`): runs the selected target on one input.
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    FuzzTargets.selected?(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
