public import BrickRequestCore
import Dispatch
import FoundationEssentials
import Synchronization

/// A `Transport` that answers from recorded exchanges (an ``HARArchive``) and never touches the
/// network: an endpoint's test runs the whole `Session` pipeline against what the real service
/// once said.
///
/// Each request is answered by the first matching exchange not served yet (``ReplayMatching``;
/// once all are, the last repeats), with its status, header fields and body bytes as recorded —
/// or its transport failure. A request that matches none fails with a `TransportError` whose
/// message names the closest recorded request and how it differs; give `unmatched` another
/// transport to send such requests there instead (recording new episodes).
///
/// ```swift
/// let replay = ReplayTransport(archive: try HARArchive(contentsOf: path))
/// let session = Session(transport: replay, reachability: AlwaysReachable())
/// ```
public final class ReplayTransport: Transport {
    private let exchanges: [HARExchange]
    private let index: Mutex<ReplayIndex>
    private let source: String
    private let forward: (any Transport)?
    private let unmatchedHandler: (@Sendable (String) -> Void)?
    private let queue = DispatchQueue(label: "BrickHAR.ReplayTransport")

    /// Creates a replay of `archive`.
    ///
    /// - Parameters:
    ///   - archive: The recorded exchanges.
    ///   - matching: What must match besides method and URL. Default ``ReplayMatching/methodAndURL``.
    ///   - source: How messages name the recording (its file). Default `the recording`.
    ///   - forwardingUnmatchedTo: A transport for requests no exchange matches (a
    ///     ``RecordingTransport`` around the real one); `nil`, the default, fails them.
    ///   - onUnmatched: Called with the message of each request no exchange matches (a test
    ///     records it as an issue).
    public init(
        archive: HARArchive,
        matching: ReplayMatching = .methodAndURL,
        source: String = "the recording",
        forwardingUnmatchedTo: (any Transport)? = nil,
        onUnmatched: (@Sendable (String) -> Void)? = nil
    ) {
        exchanges = archive.exchanges
        index = Mutex(ReplayIndex(archive.exchanges, matching: matching))
        self.source = source
        forward = forwardingUnmatchedTo
        unmatchedHandler = onUnmatched
    }

    /// How many times each recorded exchange has answered, by index.
    package var servedCounts: [Int] { index.withLock { $0.served } }

    /// Answers from the recording, asynchronously, on the replay's own queue.
    public func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        let probe = ReplayProbe(
            method: request.method.rawValue,
            url: request.urlString,
            headers: request.headerFields,
            body: try? request.body?.collectedBytes()
        )
        let decision = index.withLock { $0.decide(probe) }
        let result: Result<TransportResponse, TransportError>
        switch decision {
        case .answer(let chosen):
            result = ScriptedDelivery.delivered(exchanges[chosen].result(url: request.urlString), for: request)
        case .unmatched(let closest, let differences):
            if let forward { return forward.start(request, completion: completion) }
            let message = index.withLock { $0.unmatchedMessage(probe, closest: closest, differences: differences, source: source) }
            unmatchedHandler?(message)
            result = .failure(TransportError(.other, message: message))
        }
        let delivered = Atomic(false)
        let deliver: @Sendable (Result<TransportResponse, TransportError>) -> Void = { outcome in
            guard !delivered.exchange(true, ordering: .acquiringAndReleasing) else { return }
            completion(outcome)
        }
        queue.async { deliver(result) }
        return TransportTask { [queue] in
            queue.async { deliver(.failure(TransportError(.cancelled, message: "cancelled"))) }
        }
    }
}

extension RequestBody {
    /// The body's bytes when it is held in memory or in files (not a stream).
    func collectedBytes() throws -> Data {
        var data = Data()
        for segment in segments {
            switch segment {
            case .data(let bytes): data.append(bytes)
            case .file(let path):
                guard let bytes = FileManager.default.contents(atPath: path) else {
                    throw HARError("cannot read the body file \(path)")
                }
                data.append(bytes)
            case .stream: throw HARError("a streamed body is not collected")
            }
        }
        return data
    }
}
