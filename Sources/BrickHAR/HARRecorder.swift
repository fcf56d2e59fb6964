public import BrickRequestCore
import FoundationEssentials
import Synchronization

/// A flight recorder for production: keeps a session's last exchanges — bounded in number and
/// bytes, bodies cut short, secrets redacted — and writes them as an HTTP Archive on demand, what
/// a support engineer asks for after an incident.
///
/// ```swift
/// let recorder = HARRecorder(limit: 500)
/// let session = Session(configuration: configuration, instruments: [recorder])
/// …
/// try recorder.writeHAR(to: "/var/tmp/api-\(incident).har")   // an admin endpoint, a signal handler's task
/// ```
///
/// Opt-in: a session without it pays nothing, and one with it paused (``isRecording`` `false`)
/// pays one atomic load per request. Each attempt is an exchange (a retry is a second one), as
/// sent: with the header fields instruments added (`traceparent`), after redaction. Recording
/// happens on the transport's thread when an attempt ends: a copy of the headers and at most
/// `bodyLimit` bytes of each body.
public final class HARRecorder: RequestInstrument {
    /// The most exchanges kept; the oldest go first.
    let limit: Int
    /// The most bytes kept (bodies, header fields, URLs); the oldest exchanges go first.
    let maxBytes: Int
    /// The most bytes of each body kept; the rest is cut.
    let bodyLimit: Int
    /// What is redacted.
    let redaction: HARRedaction
    private let recording = Atomic<Bool>(true)
    private let ring: Mutex<Ring>

    /// Creates a recorder, recording.
    ///
    /// - Parameters:
    ///   - limit: The most exchanges kept. Default 500.
    ///   - maxBytes: The most bytes kept. Default 16 MiB.
    ///   - bodyLimit: The most bytes of each body kept. Default 64 KiB.
    ///   - redaction: What to redact besides the credential header fields; pass the session's
    ///     `sensitiveHeaders` and your secret query parameters.
    public init(
        limit: Int = 500,
        maxBytes: Int = 16 << 20,
        bodyLimit: Int = 64 << 10,
        redaction: HARRedaction = HARRedaction()
    ) {
        self.limit = max(1, limit)
        self.maxBytes = max(0, maxBytes)
        self.bodyLimit = max(0, bodyLimit)
        self.redaction = redaction
        ring = Mutex(Ring())
    }

    /// Whether requests are recorded (set `false` to pause; what is kept stays).
    public var isRecording: Bool {
        get { recording.load(ordering: .relaxed) }
        set { recording.store(newValue, ordering: .relaxed) }
    }

    /// The exchanges kept, oldest first.
    public var exchanges: [HARExchange] { ring.withLock { $0.ordered } }

    /// How many bytes the kept exchanges hold (by the recorder's count).
    public var byteCount: Int { ring.withLock { $0.bytes } }

    /// The exchanges kept, as an archive.
    public var archive: HARArchive { HARArchive(exchanges: exchanges) }

    /// Writes the kept exchanges to `path` as HAR (atomically).
    ///
    /// - Parameter path: The file.
    /// - Throws: ``HARError`` when it cannot be written.
    public func writeHAR(to path: String) throws(HARError) {
        try archive.write(to: path)
    }

    /// Forgets every kept exchange.
    public func removeAll() {
        ring.withLock { $0 = Ring() }
    }

    /// An observer of the request while recording; `nil` (nothing done per attempt) when paused.
    public func observe(_ request: TransportRequest, operation: String?) -> (any RequestObserver)? {
        recording.load(ordering: .relaxed) ? Observer(self) : nil
    }

    /// Keeps `exchange`, dropping the oldest past the bounds.
    func keep(_ exchange: HARExchange) {
        let size = exchange.byteCount
        guard size <= maxBytes else { return }
        ring.withLock { ring in
            ring.append(exchange, size: size)
            while ring.count > limit || ring.bytes > maxBytes { ring.removeOldest() }
        }
    }

    /// One request's attempts.
    private final class Observer: RequestObserver {
        private let recorder: HARRecorder
        /// When the current attempt started. Attempts never overlap.
        private let startedAt = Mutex(Date())

        init(_ recorder: HARRecorder) {
            self.recorder = recorder
        }

        func attemptWillStart(_ request: inout TransportRequest, resendCount: Int) {
            startedAt.withLock { $0 = Date() }
        }

        func attemptDidEnd(_ result: Result<TransportResponse, TransportError>, request: TransportRequest, resendCount: Int) {
            recorder.keep(
                HARExchange(
                    request: request,
                    result: result,
                    startedAt: startedAt.withLock { $0 },
                    redaction: recorder.redaction,
                    bodyLimit: recorder.bodyLimit
                )
            )
        }
    }

    /// The kept exchanges: a ring, oldest at `head`.
    private struct Ring {
        var slots: [(exchange: HARExchange, size: Int)?] = []
        var head = 0
        var count = 0
        var bytes = 0

        mutating func append(_ exchange: HARExchange, size: Int) {
            if count == slots.count {
                // Full (or empty): grow, oldest first again.
                let kept = (0..<count).map { slots[(head + $0) % slots.count] }
                slots = kept + Array(repeating: nil, count: max(8, slots.count))
                head = 0
            }
            slots[(head + count) % slots.count] = (exchange, size)
            count += 1
            bytes += size
        }

        mutating func removeOldest() {
            guard count > 0, let oldest = slots[head] else { return }
            bytes -= oldest.size
            slots[head] = nil
            head = (head + 1) % slots.count
            count -= 1
        }

        var ordered: [HARExchange] {
            (0..<count).compactMap { slots[(head + $0) % slots.count]?.exchange }
        }
    }
}
