import BrickRequest
import BrickTestServer
import BrickTracing
import Foundation
import InMemoryLogging
import InMemoryTracing
import Logging
import Testing
import Tracing

/// An endpoint retried quickly, with an optional operation name.
final class Traced: Component, GETRequestType, DataResponseType {
    let urlString: String
    let session: Session
    let operationName: String?
    let retries: Int
    var autoRetryConfiguration: AutoRetryConfiguration {
        AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: retries)
    }
    init(_ url: String, session: Session, operation: String? = nil, retries: Int = 2) {
        self.urlString = url
        self.session = session
        self.operationName = operation
        self.retries = retries
        super.init()
    }
}

@Suite("Tracing: a client span per attempt, the trace's context sent", .timeLimit(.minutes(3)))
struct TracingInstrumentTests {
    @Test("a retried request: one span per attempt with its resend count, each a child of the caller's, its context sent")
    func spanPerAttempt() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.script("/flaky", [.status(503), .ok("fine")])
        let tracer = W3CTestTracer()
        let session = Session(instruments: [TracingInstrument(tracer: tracer)])
        let parent = tracer.startSpan("caller")
        var context = ServiceContext.topLevel
        context = parent.context
        let response = await ServiceContext.withValue(context) {
            await Traced(server.baseURL + "/flaky?token=secret", session: session).response()
        }
        parent.end()
        #expect(response.status == .ok)
        let spans = tracer.finishedSpans.filter { $0.operationName != "caller" }
        try #require(spans.count == 2)
        let (first, second) = (spans[0], spans[1])
        for span in spans {
            #expect(span.operationName == "GET")
            #expect(span.kind == .client)
            #expect(span.attributes["http.request.method"]?.toSpanAttribute() == "GET")
            #expect(span.attributes["server.address"]?.toSpanAttribute() == "127.0.0.1")
            #expect(span.attributes["server.port"]?.toSpanAttribute() == .int64(Int64(server.port)))
            #expect(span.attributes["url.full"]?.toSpanAttribute() == .string(server.baseURL + "/flaky"))
            #expect(span.traceID == parent.context.inMemorySpanContext?.traceID)
            #expect(span.parentSpanID == parent.context.inMemorySpanContext?.spanID)
        }
        #expect(first.attributes["http.response.status_code"]?.toSpanAttribute() == 503)
        #expect(first.attributes["error.type"]?.toSpanAttribute() == "503")
        #expect(first.status?.code == .error)
        #expect(first.attributes["http.request.resend_count"] == nil)
        #expect(second.attributes["http.response.status_code"]?.toSpanAttribute() == 200)
        #expect(second.attributes["http.request.resend_count"]?.toSpanAttribute() == 1)
        #expect(second.attributes["error.type"] == nil)
        #expect(second.status == nil)
        // Each attempt carried its own span's context, in W3C form, to the server.
        let sent = server.requests(path: "/flaky").map { $0.header("traceparent") }
        #expect(sent == spans.map { "00-\($0.traceID)-\($0.spanID)-01" })
    }

    @Test("the outcome's log entry joins the last attempt's span (trace_id, span_id through the logger's metadata provider) and gives its duration")
    func logJoinsTrace() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.script("/flaky", [.status(503), .ok("fine")])
        let tracer = W3CTestTracer()
        var handler = InMemoryLogHandler()
        // What swift-otel's `.otel` provider does for its own span context.
        handler.metadataProvider = Logger.MetadataProvider {
            guard let span = ServiceContext.current?.inMemorySpanContext else { return [:] }
            return ["trace_id": "\(span.traceID)", "span_id": "\(span.spanID)"]
        }
        var logger = Logger(label: "traced") { _ in handler }
        logger.logLevel = .debug
        let session = Session(logger: logger, instruments: [TracingInstrument(tracer: tracer)])
        let response = await Traced(server.baseURL + "/flaky", session: session).response()
        #expect(response.status == .ok)
        let spans = tracer.finishedSpans
        try #require(spans.count == 2)
        let finished = try #require(handler.entries.first { $0.message.description == "request finished" })
        #expect(finished.metadata["trace_id"] == "\(spans[1].traceID)")
        #expect(finished.metadata["span_id"] == "\(spans[1].spanID)", "the last attempt's span, not the first's")
        let duration = try #require(finished.metadata["http.client.request.duration"].flatMap { Double("\($0)") })
        #expect(duration > 0 && duration < 60)
        // Entries written outside any attempt (the request's start) carry no span.
        let started = try #require(handler.entries.first { $0.message.description == "request started" })
        #expect(started.metadata["span_id"] == nil)
    }

    @Test("the endpoint's operation name names the span; a transport failure is recorded as error.type")
    func operationNameAndFailure() async throws {
        let server = try await BrickTestServer.start()
        let url = server.baseURL + "/status/200"
        await server.shutdown()  // nothing listens on the port any more
        let tracer = W3CTestTracer()
        let session = Session(instruments: [TracingInstrument(tracer: tracer)])
        let response = await Traced(url, session: session, operation: "GetThing", retries: 0).response()
        #expect(response.error != nil)
        let span = try #require(tracer.finishedSpans.first)
        #expect(tracer.finishedSpans.count == 1)
        #expect(span.operationName == "GetThing")
        #expect(span.attributes["brick.operation"]?.toSpanAttribute() == "GetThing")
        #expect(span.attributes["error.type"]?.toSpanAttribute() == "cannotConnect")
        #expect(span.status?.code == .error)
        #expect(span.attributes["http.response.status_code"] == nil)
    }

    @Test("the bootstrapped or bound tracer is read per request; with none, the request is left alone")
    func followsTheInstrumentationSystem() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        let session = Session(instruments: [TracingInstrument()])
        let request = try TransportRequest(method: .get, url: server.baseURL + "/get")
        // No tracer: the instrument declines, nothing is sent.
        #expect(TracingInstrument().observe(request, operation: nil) == nil)
        _ = try await Traced(server.baseURL + "/get", session: session).value
        #expect(server.requests(path: "/get").last?.header("traceparent") == nil)
        let tracer = W3CTestTracer()
        try await withTracer(tracer) {
            _ = try await Traced(server.baseURL + "/get", session: session).value
        }
        #expect(tracer.finishedSpans.count == 1)
        #expect(server.requests(path: "/get").last?.header("traceparent") != nil)
    }
}

/// An in-memory tracer that propagates its context as W3C `traceparent`, as OpenTelemetry's does.
final class W3CTestTracer: Tracer {
    private let recorder = InMemoryTracer(
        idGenerator: .init(
            nextTraceID: { randomHex(bytes: 16) },
            nextSpanID: { randomHex(bytes: 8) }
        )
    )

    var finishedSpans: [FinishedInMemorySpan] { recorder.finishedSpans }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> InMemorySpan {
        recorder.startSpan(operationName, context: context(), ofKind: kind, at: instant(), function: function, file: fileID, line: line)
    }

    func activeSpan(identifiedBy context: ServiceContext) -> InMemorySpan? { recorder.activeSpan(identifiedBy: context) }

    func forceFlush() {}

    func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        guard let span = context.inMemorySpanContext else { return }
        injector.inject("00-\(span.traceID)-\(span.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract)
    where Extract.Carrier == Carrier {}
}

private func randomHex(bytes: Int) -> String {
    (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
}
