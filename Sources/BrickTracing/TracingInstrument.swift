public import BrickRequest
import HTTPTypes
import Synchronization
public import Tracing

/// Traces a session's requests through swift-distributed-tracing: a client span **per attempt**,
/// as OpenTelemetry's HTTP conventions ask, with the trace's context injected into each attempt's
/// header fields (`traceparent` and `tracestate` with a W3C tracer such as swift-otel's).
///
/// ```swift
/// import BrickTracing
/// let session = Session(instruments: [TracingInstrument()])
/// ```
///
/// Each span is a child of the caller's span (the `ServiceContext` of the task that awaits `value`
/// or calls `resume()`), named after the method (`GET`) or the endpoint's
/// `BrickRequest.RequestType.operationName` (`GetUser`) — never the raw path. Its attributes:
/// `http.request.method`, `server.address`, `server.port`, `url.full` (without credentials and
/// query), `http.response.status_code`, `error.type` (a `4xx`/`5xx` status, or the transport
/// error's kind), `http.request.resend_count` on the second attempt and later, and
/// `brick.operation` where the endpoint names one. A `4xx` or `5xx` marks the span as an error.
///
/// The session's log entry for a request's outcome (`request finished`, `request failed`) is
/// written in the context of the request's last span: a `Logger` whose `metadataProvider` reads
/// the trace — swift-otel's `Logger.MetadataProvider.otel`, given to `LoggingSystem.bootstrap` or
/// to the session's logger — carries that span's `trace_id` and `span_id`, so the entry joins it.
///
/// With no tracer bootstrapped (nor bound with `withTracer`), a request costs nothing more: the
/// instrument declines it.
public struct TracingInstrument: RequestInstrument {
    private let tracer: (any Tracer)?

    /// Creates the instrument.
    ///
    /// - Parameter tracer: The tracer; `nil` (the default) for the one the process bootstrapped
    ///   (`InstrumentationSystem.bootstrap`), read when each request begins.
    public init(tracer: (any Tracer)? = nil) {
        self.tracer = tracer
        hasOwnTracer = tracer != nil
    }

    /// Whether ``tracer`` is set: asked without copying the existential out.
    private let hasOwnTracer: Bool

    /// Observes a request when a tracer is at work; otherwise declines it.
    public func observe(_ request: TransportRequest, operation: String?) -> (any RequestObserver)? {
        // Type comparisons, not casts, first: this runs for every request of an application that
        // traces nothing. (The process's instrument is read every time: `withTracer` binds one to
        // a task, which no cached verdict could see.)
        if !hasOwnTracer,
            ObjectIdentifier(type(of: InstrumentationSystem.instrument)) == ObjectIdentifier(NoOpInstrument.self)
        {
            return nil
        }
        let tracer = self.tracer ?? InstrumentationSystem.tracer
        if ObjectIdentifier(type(of: tracer)) == ObjectIdentifier(NoOpTracer.self) { return nil }
        return RequestSpans(tracer: tracer, context: ServiceContext.current ?? .topLevel, operation: operation)
    }
}

/// The spans of one request's attempts. Attempts never overlap (``RequestObserver``), so one slot
/// holds the span under way.
private final class RequestSpans: RequestObserver {
    let tracer: any Tracer
    let context: ServiceContext
    let operation: String?
    private let current = Lock<(any Span)?>(nil)
    /// The context of the last attempt's span, once it ended: the outcome's log entry runs in it.
    private let last = Lock<ServiceContext?>(nil)

    init(tracer: any Tracer, context: ServiceContext, operation: String?) {
        self.tracer = tracer
        self.context = context
        self.operation = operation
    }

    func attemptWillStart(_ request: inout TransportRequest, resendCount: Int) {
        let span = tracer.startSpan(operation ?? request.method.rawValue, context: context, ofKind: .client)
        span.updateAttributes { attributes in
            attributes["http.request.method"] = request.method.rawValue
            attributes["server.address"] = request.host
            attributes["server.port"] = request.port
            attributes["url.full"] = request.redactedURL
            if resendCount > 0 { attributes["http.request.resend_count"] = resendCount }
            if let operation { attributes["brick.operation"] = operation }
        }
        var fields = request.headerFields
        tracer.inject(span.context, into: &fields, using: HeaderFieldsInjector())
        request.headerFields = fields
        current.withLock { $0 = span }
    }

    func attemptDidEnd(
        _ result: Result<TransportResponse, TransportError>,
        request: TransportRequest,
        resendCount: Int
    ) {
        guard let span = current.withLock({ slot in defer { slot = nil }; return slot }) else { return }
        switch result {
        case .success(let response):
            let code = response.status.code
            span.attributes["http.response.status_code"] = code
            if code >= 400 {
                span.attributes["error.type"] = String(code)
                span.setStatus(SpanStatus(code: .error))
            }
        case .failure(let error):
            span.attributes["error.type"] = error.kind.description
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error, message: error.message))
        }
        last.withLock { $0 = span.context }
        span.end()
    }

    func withLogContext(_ log: () -> Void) {
        guard let context = last.withLock({ $0 }) else { return log() }
        ServiceContext.withValue(context) { log() }
    }
}

/// Writes a tracer's context into a request's header fields; a value that is not a valid field is
/// left out rather than sent.
private struct HeaderFieldsInjector: Injector {
    func inject(_ value: String, forKey key: String, into fields: inout HTTPFields) {
        guard let name = HTTPField.Name(key), HTTPField.isValidValue(value) else { return }
        fields[name] = value
    }
}
