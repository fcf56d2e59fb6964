@_spi(TransportImplementation) public import BrickRequest
public import FoundationEssentials
public import HTTPTypes
public import OpenAPIRuntime
import Synchronization

/// A swift-openapi-runtime `ClientTransport` that sends a generated client's operations through a
/// `BrickRequest.Session`: its transport (libcurl), retries keyed to reachability and parking,
/// traffic control, authenticator, limits, cache and instruments (the operation ID names spans,
/// metrics and logs).
///
/// ```swift
/// import BrickOpenAPI
/// let client = Client(serverURL: url, transport: BrickRequestTransport(session: .api))
/// ```
///
/// Bodies stream both ways. A request body of known length up to
/// ``Configuration/collectedBodyLimit`` that may be iterated more than once is collected (it can
/// be sent again); any other is streamed as the connection takes it, with chunked transfer coding
/// when its length is unknown. A body that can be iterated only once (`.single`) is never sent
/// twice: once it started, the request is not retried, replayed after a `401` or redirected with
/// its body. A response body is handed to the client as soon as the response head arrives, and
/// the transfer pauses while more than ``Configuration/responseBufferSize`` bytes wait for the
/// client to read them.
///
/// Cancelling the calling task cancels the transfer, before the head or while the body is read;
/// so does dropping a response body unread.
public struct BrickRequestTransport: ClientTransport {
    /// How operations are sent.
    public struct Configuration: Sendable {
        /// How operations retry (idempotent ones only, unless they carry an `Idempotency-Key`).
        /// Default `BrickRequest.AutoRetryConfiguration.soft` (3 retries).
        public var retry: AutoRetryConfiguration
        /// Request bodies of known length up to this many bytes that can be iterated again are
        /// collected before sending (they can be sent again on a retry); others are streamed.
        /// Default 1 MiB.
        public var collectedBodyLimit: Int
        /// Bytes of a response body that may wait for the client before the transfer pauses.
        /// Default 256 KiB.
        public var responseBufferSize: Int
        /// The limit for a whole operation, or `nil` for the session's.
        public var timeout: Duration?
        /// The largest response body accepted, or `nil` for the session's.
        public var maxResponseSize: Int64?
        /// Signs each attempt (and refreshes on a `401`), or `nil`.
        public var authenticator: Authenticator?
        /// The cache policy of `GET` operations, or `nil` not to use a cache. With a policy, a `GET`
        /// response body is collected (within ``maxResponseSize``) so that it can be stored.
        public var cachePolicy: CachePolicy?

        /// Creates a configuration.
        ///
        /// - Parameters:
        ///   - retry: How operations retry.
        ///   - collectedBodyLimit: The largest request body collected before sending.
        ///   - responseBufferSize: Response bytes that may wait for the client.
        ///   - timeout: The limit for a whole operation.
        ///   - maxResponseSize: The largest response body accepted.
        ///   - authenticator: Signs each attempt.
        ///   - cachePolicy: The cache policy of `GET` operations.
        public init(
            retry: AutoRetryConfiguration = .soft,
            collectedBodyLimit: Int = 1 << 20,
            responseBufferSize: Int = 256 << 10,
            timeout: Duration? = nil,
            maxResponseSize: Int64? = nil,
            authenticator: Authenticator? = nil,
            cachePolicy: CachePolicy? = nil
        ) {
            self.retry = retry
            self.collectedBodyLimit = collectedBodyLimit
            self.responseBufferSize = responseBufferSize
            self.timeout = timeout
            self.maxResponseSize = maxResponseSize
            self.authenticator = authenticator
            self.cachePolicy = cachePolicy
        }
    }

    /// The session that sends the operations.
    public let session: Session
    /// How operations are sent.
    public let configuration: Configuration
    /// What tests watch of the bodies, or `nil`.
    let monitor: BodyMonitor?

    /// Creates a transport.
    ///
    /// - Parameters:
    ///   - session: The session that sends the operations. Default `BrickRequest.Session.shared`.
    ///   - configuration: How operations are sent.
    public init(session: Session = .shared, configuration: Configuration = Configuration()) {
        self.init(session: session, configuration: configuration, monitor: nil)
    }

    /// A transport whose bodies `monitor` watches (for tests of backpressure).
    package init(session: Session, configuration: Configuration, monitor: BodyMonitor?) {
        self.session = session
        self.configuration = configuration
        self.monitor = monitor
    }

    /// Sends one operation; returns once the response head arrived, its body streaming.
    public func send(
        _ request: HTTPRequest,
        body: HTTPBody?,
        baseURL: URL,
        operationID: String
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var base = baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let url = base + (request.path ?? "/")
        let requestBody = try await Self.body(body, configuration: configuration)
        if let monitor, case .stream(let source) = requestBody?.segments.first { monitor.noteSource(source) }
        var headers: [String: String] = [:]
        for field in request.headerFields {
            let name = field.name.canonicalName
            // Repeated fields become one: list fields joined with ", " (RFC 9110 §5.3), but
            // cookies with "; " (RFC 6265 §5.4), or a server reads `a=1, b=2` as one cookie.
            let separator = field.name == .cookie ? "; " : ", "
            headers[name] = headers[name].map { $0 + separator + field.value } ?? field.value
        }
        let caches = configuration.cachePolicy != nil && request.method == .get
        let pipe = ResponseBodyPipe(highWater: configuration.responseBufferSize, monitor: monitor)
        let retry = configuration.retry
        let exchange = OperationExchange(pipe: pipe)
        let stream = ResponseBodyStream(
            onResponse: { status, fields in
                // A status the session may retry is provisional: its body waits, the client sees
                // it only if no other attempt follows.
                let provisional = retry.maxRetryCount > 0 && retry.retryableStatusCodes.contains(status.code)
                return exchange.responseStarted(status: status, fields: fields, provisional: provisional)
            },
            paced: { bytes in pipe.receive(bytes) }
        )
        pipe.resume = { [weak stream] in stream?.resumeDelivery() }
        let operation: OpenAPIOperation =
            if caches, let policy = configuration.cachePolicy {
                CachedOpenAPIOperation(
                    method: request.method,
                    url: url,
                    headers: headers,
                    body: requestBody,
                    operationID: operationID,
                    session: session,
                    configuration: configuration,
                    destination: .memory,
                    cachePolicy: policy
                )
            } else {
                OpenAPIOperation(
                    method: request.method,
                    url: url,
                    headers: headers,
                    body: requestBody,
                    operationID: operationID,
                    session: session,
                    configuration: configuration,
                    destination: .stream(stream)
                )
            }
        let lifecycle = operation.lifecycle
        let cancel: @Sendable () -> Void = { lifecycle.cancel() }
        let running = Task { [operation] in
            let response = await operation.response()
            exchange.completed(response)
        }
        let head: HTTPResponse = try await withTaskCancellationHandler {
            try await exchange.head()
        } onCancel: {
            running.cancel()
            cancel()
        }
        if request.method == .head { return (head, nil) }
        let length: HTTPBody.Length =
            if head.headerFields[.contentEncoding] == nil, let value = head.headerFields[.contentLength],
                let count = Int64(value)
            {
                .known(count)
            } else {
                .unknown
            }
        let sequence = ResponseBodySequence(pipe: pipe, cancel: cancel)
        return (head, HTTPBody(sequence, length: length, iterationBehavior: .single))
    }

    /// The request body as the session sends it: collected when small, of known length and
    /// iterable again; otherwise a stream that goes out once (`.single`) or once per attempt.
    static func body(_ body: HTTPBody?, configuration: Configuration) async throws -> RequestBody? {
        guard let body else { return nil }
        if case .known(let length) = body.length, length <= configuration.collectedBodyLimit,
            body.iterationBehavior == .multiple
        {
            let bytes = try await [UInt8](collecting: body, upTo: Int(length))
            return .data(Data(bytes))
        }
        let length: Int64? = if case .known(let length) = body.length { length } else { nil }
        let source = RequestBodySource(length: length, isReplayable: body.iterationBehavior == .multiple) { body }
        return RequestBody(segments: [.stream(source)])
    }
}

/// Where the response head of one operation is awaited, and how the session's outcome reaches
/// the body. One lock guards its state.
final class OperationExchange: Sendable {
    private struct State {
        var head: HTTPResponse?
        var waiter: CheckedContinuation<HTTPResponse, any Error>?
        var failure: (any Error)?
        var completed = false
        /// Another attempt's response was refused after the head went out: the body the client
        /// reads was cut (its connection broke) and cannot be continued.
        var refusedAnotherAttempt = false
    }

    private let state = Lock(State())
    let pipe: ResponseBodyPipe

    init(pipe: ResponseBodyPipe) {
        self.pipe = pipe
    }

    /// The response head, as soon as a response that will not be retried starts its body, or once
    /// the session's outcome is known (a response with no body, a provisional one that was the
    /// last, a collected one) — or the outcome's error.
    func head() async throws -> HTTPResponse {
        try await withCheckedThrowingContinuation { continuation in
            let outcome: Result<HTTPResponse, any Error>? = state.withLock { state in
                if let head = state.head { return .success(head) }
                if let failure = state.failure { return .failure(failure) }
                state.waiter = continuation
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    /// A response starts its body (on the transport's thread). Returns whether to take it: a
    /// response after the head was handed to the client (another attempt, after a failure
    /// mid-body) is refused, so that the client's body is never spliced from two attempts.
    func responseStarted(status: HTTPResponse.Status, fields: HTTPFields, provisional: Bool) -> Bool {
        let (taken, waiter, head) = state.withLock {
            state -> (Bool, CheckedContinuation<HTTPResponse, any Error>?, HTTPResponse?) in
            if state.head != nil || state.completed {
                state.refusedAnotherAttempt = true
                return (false, nil, nil)
            }
            pipe.responseStarted(provisional: provisional, status: status.code)
            if provisional { return (true, nil, nil) }
            var head = HTTPResponse(status: status)
            head.headerFields = fields
            state.head = head
            defer { state.waiter = nil }
            return (true, state.waiter, head)
        }
        if let waiter, let head { waiter.resume(returning: head) }
        return taken
    }

    /// The session delivered the operation's outcome.
    func completed(_ response: Response<Empty, BrickError>) {
        let (published, cut) = state.withLock { state in
            state.completed = true
            return (state.head != nil, state.refusedAnotherAttempt)
        }
        if published {
            // The head went out with the body streaming: the outcome ends the body.
            guard response.transportResponse == nil else {
                pipe.finish(throwing: nil)
                return
            }
            var error = response.error ?? BrickError.cancelled
            if cut && error.code == .cancelled {
                // Nobody cancelled: the body's connection broke and the session's retry was
                // refused (a body is never spliced from two attempts).
                error = BrickError(
                    .connectionLost,
                    message: "the connection broke while the response body was read; the body cannot be continued from another attempt",
                    underlying: error
                )
            }
            pipe.finish(throwing: error)
            return
        }
        let result: Result<HTTPResponse, any Error>
        if let transport = response.transportResponse {
            var head = HTTPResponse(status: transport.status)
            head.headerFields = transport.headerFields
            result = .success(head)
            if let data = transport.body {
                // Collected (a cached operation): the body is the collected bytes.
                data.withUnsafeBytes { _ = pipe.receive($0) }
            }
            pipe.finish(throwing: nil)
        } else {
            let error: any Error = response.error ?? BrickError(.cancelled, message: "the operation ended without a response")
            result = .failure(error)
            pipe.finish(throwing: error)
        }
        let waiter = state.withLock { state -> CheckedContinuation<HTTPResponse, any Error>? in
            switch result {
            case .success(let head): state.head = head
            case .failure(let error): state.failure = error
            }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: result)
    }
}
