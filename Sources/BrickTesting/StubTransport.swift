@_spi(TransportImplementation) import BrickRequest
import BrickHAR
import Dispatch
import FoundationEssentials
import Synchronization
import Testing

/// A scripted response for ``StubTransport``.
public struct StubResponse: Sendable {
    /// The status.
    public var status: HTTPResponse.Status
    /// The header fields.
    public var headers: HTTPFields
    /// The body.
    public var body: Data
    /// A transport failure to deliver instead of a response.
    public var error: TransportError?
    /// How long the transport takes, on the stub's ``ManualClock``.
    public var delay: Duration

    /// Creates a scripted response.
    ///
    /// - Parameters:
    ///   - status: The status.
    ///   - headers: The header fields.
    ///   - body: The body.
    ///   - delay: The time it takes, on the stub's clock.
    public init(
        status: HTTPResponse.Status = .ok,
        headers: HTTPFields = [:],
        body: Data = Data(),
        delay: Duration = .zero
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.error = nil
        self.delay = delay
    }

    /// A JSON body with `Content-Type: application/json`.
    ///
    /// - Parameters:
    ///   - text: The JSON text.
    ///   - status: The status; default 200.
    /// - Returns: The scripted response.
    public static func json(_ text: String, status: HTTPResponse.Status = .ok) -> StubResponse {
        StubResponse(status: status, headers: [.contentType: "application/json"], body: Data(text.utf8))
    }

    /// An empty body with this status.
    ///
    /// - Parameter status: The status.
    /// - Returns: The scripted response.
    public static func status(_ status: HTTPResponse.Status) -> StubResponse {
        StubResponse(status: status)
    }

    /// A transport failure.
    ///
    /// - Parameters:
    ///   - kind: The failure's kind.
    ///   - requestBytesSent: Whether the request is reported as (partly) sent.
    /// - Returns: The scripted failure.
    public static func failure(_ kind: TransportError.Kind, requestBytesSent: Bool = false) -> StubResponse {
        var response = StubResponse()
        response.error = TransportError(kind, message: "scripted \(kind) failure", requestBytesSent: requestBytesSent)
        return response
    }

    /// The same response, taking `delay` on the stub's clock.
    ///
    /// - Parameter delay: The delay.
    /// - Returns: The delayed response.
    public func delayed(by delay: Duration) -> StubResponse {
        var copy = self
        copy.delay = delay
        return copy
    }
}

/// A `Transport` that answers from scripts and records every request: endpoints are tested with
/// the real `Session` pipeline (rendering, validation, serialization) and no network.
///
/// Unimplemented by default: a request with no script fails the current test, naming the request,
/// and fails with a `TransportError` — never a plausible made-up answer.
///
/// A scripted body reaches the request's destination as from `CurlTransport` (memory, a file, or a
/// `ResponseBodyStream`), and a request with a progress handler gets one report, all sent and all
/// received, before its response.
///
/// ```swift
/// let stub = StubTransport()
/// stub.stub(.get, "/users", .json(#"{"name":"Ada"}"#))
/// let session = Session.testing(stub)
/// ```
public final class StubTransport: Transport {
    private struct Route {
        var method: HTTPRequest.Method?
        var pattern: String
        var responses: [StubResponse]
        var served = 0

        func matches(_ request: TransportRequest) -> Bool {
            if let method, method != request.method { return false }
            let path = String((request.head.path ?? "/").split(separator: "?", maxSplits: 1).first ?? "/")
            if pattern.hasSuffix("*") { return path.hasPrefix(pattern.dropLast()) }
            return path == pattern
        }
    }

    private struct State {
        var routes: [Route] = []
        var requests: [TransportRequest] = []
        var inFlight: [Int: @Sendable (Result<TransportResponse, TransportError>) -> Void] = [:]
        var nextID = 0
    }

    private let state = Lock(State())
    private let clock: ManualClock?
    private let queue = DispatchQueue(label: "BrickTesting.StubTransport")
    /// Where the stub was made: an unscripted request is reported there, in the test's file.
    private let sourceLocation: SourceLocation

    /// Creates a stub with no scripts.
    ///
    /// - Parameters:
    /// The place defaults to where the stub is made (the test's line, not this file's), taken from
    /// `#fileID`, `#filePath`, `#line` and `#column`, so the stub is made alike in a Swift Testing
    /// test, an XCTest case, a sample app or a preview (no file needs to import Testing).
    ///
    /// - Parameters:
    ///   - clock: The clock that delayed responses wait on; without one, delays are ignored.
    ///   - fileID: The file a request with no script is reported in.
    ///   - filePath: That file's path.
    ///   - line: The line it is reported at.
    ///   - column: The column.
    public init(
        clock: ManualClock? = nil,
        fileID: String = #fileID,
        filePath: String = #filePath,
        line: Int = #line,
        column: Int = #column
    ) {
        self.clock = clock
        self.sourceLocation = SourceLocation(fileID: fileID, filePath: filePath, line: line, column: column)
    }

    /// Scripts the responses for requests whose path matches `path` (exact, or a prefix ending in
    /// `*`), in order; the last one repeats.
    ///
    /// - Parameters:
    ///   - method: The method, or `nil` for any.
    ///   - path: The path without query, e.g. `/users` or `/users/*`.
    ///   - responses: One response per request, in order; at least one.
    public func stub(_ method: HTTPRequest.Method? = nil, _ path: String, _ responses: StubResponse...) {
        precondition(!responses.isEmpty, "a stub needs at least one response")
        state.withLock { $0.routes.append(Route(method: method, pattern: path, responses: responses)) }
    }

    /// Every request started, in order, as rendered.
    public var requests: [TransportRequest] { state.withLock { $0.requests } }

    /// Answers from the matching script (the latest added wins).
    public func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        let (id, scripted) = state.withLock { state -> (Int, StubResponse?) in
            state.requests.append(request)
            state.nextID += 1
            state.inFlight[state.nextID] = completion
            guard let index = state.routes.lastIndex(where: { $0.matches(request) }) else { return (state.nextID, nil) }
            let route = state.routes[index]
            state.routes[index].served += 1
            return (state.nextID, route.responses[min(route.served, route.responses.count - 1)])
        }
        let deliver: @Sendable (Result<TransportResponse, TransportError>) -> Void = { [self] result in
            guard let handler = state.withLock({ $0.inFlight.removeValue(forKey: id) }) else { return }
            handler(ScriptedDelivery.delivered(result, for: request))
        }
        guard let scripted else {
            Issue.record(
                "StubTransport has no script for \(request.method) \(request.head.path ?? "/"); add one with stub(_:_:_:)",
                sourceLocation: sourceLocation
            )
            queue.async {
                deliver(
                    .failure(
                        TransportError(
                            .other,
                            message: "unimplemented: no stub for \(request.method) \(request.head.path ?? "/")"
                        )
                    )
                )
            }
            return TransportTask { deliver(.failure(TransportError(.cancelled, message: "cancelled"))) }
        }
        let result: Result<TransportResponse, TransportError> =
            scripted.error.map { .failure($0) }
            ?? .success(
                TransportResponse(
                    status: scripted.status,
                    headerFields: scripted.headers,
                    body: scripted.body,
                    url: request.urlString
                )
            )
        if let clock, scripted.delay > .zero {
            clock.schedule(at: clock.now.advanced(by: scripted.delay)) { deliver(result) }
        } else {
            queue.async { deliver(result) }
        }
        return TransportTask { [queue] in
            queue.async { deliver(.failure(TransportError(.cancelled, message: "cancelled"))) }
        }
    }
}

extension Session {
    /// A real ``Session`` on a ``StubTransport``: the whole pipeline runs, the network does not.
    /// Retry delays return at once (an ``ImmediateClock``): an endpoint that retries a `503` five
    /// times, 5 s apart, fails in microseconds instead of waiting on a clock nobody advances.
    ///
    /// - Parameters:
    ///   - transport: The stub.
    ///   - configuration: Headers and other settings; the transport part is not used.
    ///   - clock: The clock retry delays run on; pass your own to assert the waits (``ImmediateClock/sleeps``).
    ///   - reachability: The reachability the retry engine reads; default always reachable.
    /// - Returns: The session.
    public static func testing(
        _ transport: StubTransport,
        configuration: Configuration = Configuration(),
        clock: ImmediateClock = ImmediateClock(),
        reachability: ManualReachability = ManualReachability()
    ) -> Session {
        Session(configuration: configuration, transport: transport, reachability: reachability, clock: clock)
    }

    /// A real ``Session`` on a ``StubTransport`` whose retry delays wait on `clock` until the test
    /// advances it: for tests that look at what happens during a wait.
    ///
    /// - Parameters:
    ///   - transport: The stub.
    ///   - configuration: Headers and other settings; the transport part is not used.
    ///   - clock: The clock retry delays wait on; advance it with ``ManualClock/advance(by:)``.
    ///   - reachability: The reachability the retry engine reads; default always reachable.
    /// - Returns: The session.
    public static func testing(
        _ transport: StubTransport,
        configuration: Configuration = Configuration(),
        clock: ManualClock,
        reachability: ManualReachability = ManualReachability()
    ) -> Session {
        Session(configuration: configuration, transport: transport, reachability: reachability, clock: clock)
    }
}

extension RequestBody {
    /// All the body's bytes, reading file segments from disk (for assertions in tests).
    ///
    /// - Returns: The bytes in order.
    /// - Throws: When a file cannot be read.
    public func collectedData() throws -> Data {
        var data = Data()
        for segment in segments {
            switch segment {
            case .data(let bytes): data.append(bytes)
            case .file(let path): data.append(try Data(contentsOf: URL(fileURLWithPath: path)))
            case .stream:
                throw BrickError(.invalidRequest, message: "a streamed body (RequestBodySource) is not collected here")
            }
        }
        return data
    }
}
