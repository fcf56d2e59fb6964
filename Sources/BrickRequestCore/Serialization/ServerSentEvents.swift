/// One event of a `text/event-stream` body (server-sent events), as the HTML standard's
/// event-stream interpretation dispatches it.
public struct ServerSentEvent: Sendable, Hashable {
    /// The event type: the `event:` field, or `message` when the event names none.
    public var type: String
    /// The `data:` lines, joined with line feeds.
    public var data: String
    /// The last event ID in effect (`id:` fields persist across events), or `nil` when none was
    /// set. Send it as `Last-Event-ID` to resume a stream that supports it.
    public var id: String?
    /// The reconnection time in effect: the last `retry:` field of the stream so far, if any.
    public var retry: Duration?

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - type: The event type.
    ///   - data: The data.
    ///   - id: The last event ID.
    ///   - retry: The reconnection time in effect.
    public init(type: String = "message", data: String, id: String? = nil, retry: Duration? = nil) {
        self.type = type
        self.data = data
        self.id = id
        self.retry = retry
    }
}

/// Turns the bytes of a `text/event-stream` body into ``ServerSentEvent``s, in pieces as they
/// arrive: lines may end with CR, LF or CRLF (also split between pieces), `:` lines are
/// comments, a line without a colon is a field with an empty value, one space after the colon is
/// dropped, unknown fields are ignored, a leading byte order mark is skipped, and an event is
/// dispatched at a blank line if it has data. Bytes after the last blank line are an unfinished
/// event: they are not dispatched.
///
/// The parser holds at most ``maxEventSize`` bytes of an unfinished line and event: a stream may
/// run for days, but no single event may grow without bound. Past it, ``exceededLimit`` is set and
/// the rest of the stream is ignored.
///
/// ```swift
/// var parser = ServerSentEventParser()
/// for event in parser.parse(Array("data: hello\n\n".utf8)) { print(event.data) }   // hello
/// ```
public struct ServerSentEventParser: Sendable {
    private var line: [UInt8] = []
    private var afterCR = false
    private var atStart = true
    /// The event's `data:` lines, each followed by a line feed: empty only when it has none.
    private var data: [UInt8] = []
    private var type = ""
    /// The `id:` of the event being read; it becomes ``lastEventID`` at the event's blank line.
    private var idBuffer = ""
    /// The last event ID ("" when none): set by an `id:` field once its event's blank line has
    /// been read, and carried from event to event. What a reconnection sends as `Last-Event-ID`.
    public private(set) var lastEventID = ""
    /// The reconnection time set by the last valid `retry:` field (also one in an event that had
    /// no data), or `nil`.
    public private(set) var reconnectionTime: Duration?

    /// The most bytes of one event (its data lines) and its current line held while they are
    /// read. Default 1 MiB.
    public let maxEventSize: Int
    /// Whether an event or a line grew past ``maxEventSize``: the parser then stops parsing.
    public private(set) var exceededLimit = false

    /// Creates a parser at the start of a stream.
    ///
    /// - Parameter maxEventSize: The most bytes one unfinished event and line may hold.
    public init(maxEventSize: Int = 1 << 20) {
        self.maxEventSize = maxEventSize
    }

    /// Starts reading a new response of the same stream, after a reconnection: an unfinished
    /// line or event of the broken response is dropped; ``lastEventID`` and
    /// ``reconnectionTime`` are kept.
    public mutating func reconnected() {
        line.removeAll(keepingCapacity: true)
        afterCR = false
        atStart = true
        data.removeAll(keepingCapacity: true)
        type = ""
        idBuffer = lastEventID
    }

    /// Reads the next piece of the stream.
    ///
    /// - Parameter bytes: The bytes, in stream order.
    /// - Returns: The events completed by them, in order.
    public mutating func parse(_ bytes: some Sequence<UInt8>) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        guard !exceededLimit else { return events }
        for byte in bytes {
            if afterCR {
                afterCR = false
                if byte == 0x0A { continue }  // the LF of a CRLF
            }
            switch byte {
            case 0x0D:
                afterCR = true
                endLine(into: &events)
            case 0x0A:
                endLine(into: &events)
            default:
                line.append(byte)
                if line.count + data.count > maxEventSize {
                    exceededLimit = true
                    return events
                }
            }
        }
        return events
    }

    private mutating func endLine(into events: inout [ServerSentEvent]) {
        defer { line.removeAll(keepingCapacity: true) }
        if atStart {
            atStart = false
            if line.starts(with: [0xEF, 0xBB, 0xBF]) { line.removeFirst(3) }
        }
        guard let first = line.first else {
            dispatch(into: &events)
            return
        }
        if first == UInt8(ascii: ":") { return }
        let colon = line.firstIndex(of: UInt8(ascii: ":"))
        let name = line[..<(colon ?? line.endIndex)]
        var value = colon.map { line[($0 + 1)...] } ?? []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        switch String(decoding: name, as: UTF8.self) {
        case "event":
            type = String(decoding: value, as: UTF8.self)
        case "data":
            data.append(contentsOf: value)
            data.append(0x0A)
            if data.count > maxEventSize { exceededLimit = true }
        case "id":
            if !value.contains(0) { idBuffer = String(decoding: value, as: UTF8.self) }
        case "retry":
            if !value.isEmpty, value.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let milliseconds = Int64(String(decoding: value, as: UTF8.self))
            {
                reconnectionTime = .milliseconds(milliseconds)
            }
        default:
            break
        }
    }

    private mutating func dispatch(into events: inout [ServerSentEvent]) {
        defer {
            data.removeAll(keepingCapacity: true)
            type = ""
        }
        lastEventID = idBuffer
        guard !data.isEmpty else { return }
        data.removeLast()  // the line feed after the last data line
        events.append(
            ServerSentEvent(
                type: type.isEmpty ? "message" : type,
                data: String(decoding: data, as: UTF8.self),
                id: lastEventID.isEmpty ? nil : lastEventID,
                retry: reconnectionTime
            )
        )
    }
}
