public import BrickRequestCore
import FoundationEssentials
import Synchronization

/// A `Transport` that sends every request through another one — the real transport — and keeps
/// each exchange, redacted (``HARRedaction``), to be written as an HTTP Archive.
///
/// ```swift
/// let recording = RecordingTransport(wrapping: CurlTransport())
/// let session = Session(transport: recording)
/// …
/// try recording.archive.write(to: "Replays/fetchUser.har")
/// ```
///
/// Bodies are kept whole (a recorder for production, with bounds, is ``HARRecorder``); a request
/// body that is a stream, and a response body that went to a `ResponseBodyStream`, are not kept.
public final class RecordingTransport: Transport {
    /// The transport that sends the requests.
    let wrapped: any Transport
    /// What is redacted before an exchange is kept.
    let redaction: HARRedaction
    private let kept = Mutex<[HARExchange]>([])

    /// Records what `wrapped` does.
    ///
    /// - Parameters:
    ///   - wrapped: The real transport.
    ///   - redaction: What to redact. Default: the credential header fields.
    public init(wrapping wrapped: any Transport, redaction: HARRedaction = HARRedaction()) {
        self.wrapped = wrapped
        self.redaction = redaction
    }

    /// The exchanges so far, in the order they ended.
    public var exchanges: [HARExchange] { kept.withLock { $0 } }

    /// The exchanges so far, in the order they started.
    public var archive: HARArchive {
        HARArchive(exchanges: exchanges.sorted { $0.startedAt < $1.startedAt })
    }

    /// Starts `request` on the wrapped transport and keeps the exchange when it ends.
    public func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        let startedAt = Date()
        return wrapped.start(request) { [self] result in
            let exchange = HARExchange(request: request, result: result, startedAt: startedAt, redaction: redaction)
            kept.withLock { $0.append(exchange) }
            completion(result)
        }
    }

    /// Tells the wrapped transport.
    public func networkDidChange() {
        wrapped.networkDidChange()
    }
}

extension RecordingTransport: ThreadedTransport {
    /// The wrapped transport's, when it has a thread to lend.
    package func scheduleOnTransportThread(_ work: @escaping @Sendable () -> Void) -> Bool {
        (wrapped as? any ThreadedTransport)?.scheduleOnTransportThread(work) ?? false
    }

    /// The wrapped transport's.
    package var preferredTaskExecutor: (any TaskExecutor)? {
        (wrapped as? any ThreadedTransport)?.preferredTaskExecutor
    }
}
