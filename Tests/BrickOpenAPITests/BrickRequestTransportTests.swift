import BrickOpenAPI
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import HTTPTypes
import OpenAPIRuntime
import Synchronization
import Testing

/// A client of the generated code on a transport over `session`, against `server`.
private func client(
    _ server: BrickTestServer,
    session: Session = Session(),
    configuration: BrickRequestTransport.Configuration = .init(retry: AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: 2)),
    monitor: BodyMonitor? = nil
) throws -> Client {
    Client(
        serverURL: try #require(URL(string: server.baseURL)),
        transport: BrickRequestTransport(session: session, configuration: configuration, monitor: monitor)
    )
}

/// Starts a loopback server with the routes these tests add, for the duration of `body`.
private func withServer<T>(_ body: (BrickTestServer) async throws -> T) async throws -> T {
    try await BrickTestSupport.withServer(prepare: { server in
        // How many bytes arrived, and their sum modulo 2^32.
        server.route("/upload") { request in
            let sum = request.body.reduce(UInt32(0)) { $0 &+ UInt32($1) }
            return .ok("\(request.body.count) \(sum)")
        }
        server.route("/moved") { _ in .respond(status: 307, headers: [.init("Location", "/upload")]) }
    }, body)
}

/// `count` bytes in chunks of `chunk`, made as they are asked for; counts what it made.
private struct Chunks: AsyncSequence, Sendable {
    let count: Int
    let chunk: Int
    let made: Counter

    final class Counter: Sendable {
        let bytes = Atomic(0)
        let sum = Atomic<UInt32>(0)
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let sequence: Chunks
        var offset = 0

        mutating func next() async throws -> ArraySlice<UInt8>? {
            guard offset < sequence.count else { return nil }
            let size = Swift.min(sequence.chunk, sequence.count - offset)
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: (offset + $0) &* 31) }
            offset += size
            sequence.made.bytes.add(size, ordering: .relaxed)
            sequence.made.sum.wrappingAdd(bytes.reduce(UInt32(0)) { $0 &+ UInt32($1) }, ordering: .relaxed)
            return bytes[...]
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(sequence: self) }
}

/// A body sequence that yields one chunk, then waits until its task is cancelled.
private struct StallingChunks: AsyncSequence, Sendable {
    let started: Counter

    final class Counter: Sendable {
        let value = Atomic(0)
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let started: Counter
        var sent = false

        mutating func next() async throws -> ArraySlice<UInt8>? {
            if !sent {
                sent = true
                started.value.add(1, ordering: .relaxed)
                return Array(repeating: 7, count: 1024)[...]
            }
            try await Task.sleep(for: .seconds(3600))
            return nil
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(started: started) }
}

@Suite("BrickOpenAPI: a generated client on a Session, against the loopback server", .timeLimit(.minutes(2)))
struct BrickRequestTransportTests {
    @Test("GET with a path parameter and a query")
    func getWithPathAndQuery() async throws {
        try await withServer { server in
            let output = try await client(server).getItem(path: .init(itemID: "42"), query: .init(filter: "a b&c"))
            let echo = try output.ok.body.json
            #expect(echo.method == "GET")
            #expect(echo.path == "/anything/42")
            #expect(echo.args.additionalProperties["filter"] == "a b&c")
            #expect(echo.headers.additionalProperties["accept"] == "application/json")
        }
    }

    @Test("POST JSON: the body arrives as the server's JSON, with its content type")
    func postJSON() async throws {
        try await withServer { server in
            let output = try await client(server).createTodo(body: .json(.init(title: "write tests", done: false)))
            let echo = try output.ok.body.json
            #expect(echo.method == "POST")
            #expect(echo.json == .init(title: "write tests", done: false))
            #expect(echo.headers.additionalProperties["content-type"] == "application/json; charset=utf-8")
        }
    }

    @Test("a 503 is retried by the session; the client sees the 200")
    func serviceUnavailableRetried() async throws {
        try await withServer { server in
            server.script("/flaky", [.status(503), .ok("fine")])
            let output = try await client(server).getFlaky()
            let text = try await String(collecting: output.ok.body.plainText, upTo: 1024)
            #expect(text == "fine")
            #expect(server.requests(path: "/flaky").count == 2)
        }
    }

    @Test("a 503 to a streamed upload: a body that can be iterated again is sent again, a single one is not")
    func retriedStreamedBodies() async throws {
        try await withServer { server in
            // POSTs retry only with an Idempotency-Key: the operations here send one.
            let session = Session(configuration: .init(defaultHeaders: ["Idempotency-Key": "upload-1"]))
            let client = try client(server, session: session)
            let count = 3 << 20  // above the collected-body limit: streamed
            server.script("/upload", [.status(503)])
            let made = Chunks.Counter()
            let multiple = HTTPBody(Chunks(count: count, chunk: 64 << 10, made: made), length: .unknown, iterationBehavior: .multiple)
            let output = try await client.upload(body: .binary(multiple))
            let text = try await String(collecting: output.ok.body.plainText, upTo: 1024)
            #expect(text.hasPrefix("\(count) "))
            #expect(server.requests(path: "/upload").count == 2)
            #expect(made.bytes.load(ordering: .relaxed) == 2 * count)  // iterated once per attempt
            server.script("/upload", [.status(503)])
            let single = HTTPBody(Chunks(count: count, chunk: 64 << 10, made: Chunks.Counter()), length: .unknown, iterationBehavior: .single)
            let refused = try await client.upload(body: .binary(single))
            guard case .undocumented(let status, _) = refused else {
                Issue.record("expected the 503, got \(refused)")
                return
            }
            #expect(status == 503)
            #expect(server.requests(path: "/upload").count == 3)  // not sent again
        }
    }

    @Test("a redirect that keeps the body: sent again when the body can be iterated again, refused when it cannot")
    func redirectsWithBodies() async throws {
        try await withServer { server in
            let client = try client(server)
            let bytes = Array(repeating: UInt8(3), count: 10_000)
            // Iterable more than once: followed, the body sent again to the target.
            let multiple = HTTPBody(bytes)
            let output = try await client.uploadMoved(body: .binary(multiple))
            #expect(try await String(collecting: output.ok.body.plainText, upTo: 1024) == "10000 30000")
            // Iterable once (streamed): never sent twice, so the redirect fails with a clear error.
            let single = HTTPBody(
                AsyncStream { continuation in
                    continuation.yield(bytes[...])
                    continuation.finish()
                },
                length: .known(Int64(bytes.count))
            )
            let error = await #expect(throws: ClientError.self) { try await client.uploadMoved(body: .binary(single)) }
            let underlying = try #require(error?.underlyingError as? BrickError)
            #expect(underlying.transportError?.kind == .requestBodyFailed)
            #expect(server.requests(path: "/upload").count == 1)
        }
    }

    @Test("a streamed upload of unknown length goes out chunked, never collected; the source waits for the connection")
    func streamedUpload() async throws {
        try await withServer { server in
            let monitor = BodyMonitor()
            let made = Chunks.Counter()
            let count = 8 << 20
            let body = HTTPBody(Chunks(count: count, chunk: 64 << 10, made: made), length: .unknown, iterationBehavior: .single)
            let output = try await client(server, monitor: monitor).upload(body: .binary(body))
            let text = try await String(collecting: output.ok.body.plainText, upTo: 1024)
            #expect(text == "\(count) \(made.sum.load(ordering: .relaxed))")
            #expect(server.requests(path: "/upload").first?.header("Transfer-Encoding") == "chunked")
            // At most the buffer and one chunk ever waited between the sequence and the connection.
            let source = try #require(monitor.sources.first)
            #expect(source.largestBacklog.load(ordering: .relaxed) <= source.bufferSize + (64 << 10))
        }
    }

    @Test("a streamed download with backpressure: the transfer pauses while the client does not read")
    func streamedDownload() async throws {
        try await withServer { server in
            let monitor = BodyMonitor()
            let configuration = BrickRequestTransport.Configuration(responseBufferSize: 128 << 10)
            let count = 16 << 20
            let output = try await client(server, configuration: configuration, monitor: monitor).download(
                path: .init(count: count)
            )
            let body = try output.ok.body.binary
            #expect(body.length == .known(Int64(count)))
            var iterator = body.makeAsyncIterator()
            var received = try #require(try await iterator.next()).count
            // The client reads no more: the transfer pauses with the buffer full.
            await eventually { monitor.pauses > 0 }
            var checksum = UInt64(0)
            var offset = received
            while let chunk = try await iterator.next() {
                for (index, byte) in chunk.enumerated() where byte != UInt8((offset + index) % 256) {
                    checksum += 1
                }
                offset += chunk.count
                received += chunk.count
            }
            #expect(received == count)
            #expect(checksum == 0)
            // Never more than the buffer and one piece from libcurl waited for the client.
            #expect(monitor.largestResponseBacklog <= (128 << 10) + (64 << 10))
        }
    }

    @Test("cancelled before the response head: the call ends at once, the transfer with it")
    func cancelBeforeHead() async throws {
        try await withServer { server in
            let client = try client(server)
            let call = Task { try await client.getDelayed(path: .init(seconds: 30)) }
            await eventually { server.requests(path: "/delay/30.0").count + server.requests(path: "/delay/30").count == 1 }
            call.cancel()
            await #expect(throws: (any Error).self) { try await call.childValue }
            await eventually { server.openConnectionCount == 0 }
        }
    }

    @Test("cancelled while the request body is sent: the call ends, the body's source is stopped")
    func cancelDuringRequestBody() async throws {
        try await withServer { server in
            let client = try client(server)
            let started = StallingChunks.Counter()
            let body = HTTPBody(StallingChunks(started: started), length: .unknown, iterationBehavior: .single)
            let call = Task { try await client.upload(body: .binary(body)) }
            await eventually { started.value.load(ordering: .relaxed) == 1 }
            call.cancel()
            await #expect(throws: (any Error).self) { try await call.childValue }
            #expect(server.requests(path: "/upload").isEmpty)
        }
    }

    @Test("cancelled while the response body is read: reading ends with an error, the transfer with it")
    func cancelDuringResponseBody() async throws {
        try await withServer { server in
            let client = try client(server)
            let firstPiece = StallingChunks.Counter()
            let reader = Task {
                // 100 bytes over 20 s: read to the end unless cancelled.
                let output = try await client.drip(query: .init(numbytes: 100, duration: 20))
                var received = 0
                for try await chunk in try output.ok.body.binary {
                    received += chunk.count
                    firstPiece.value.add(1, ordering: .relaxed)
                }
                return received
            }
            await eventually { firstPiece.value.load(ordering: .relaxed) > 0 }
            reader.cancel()
            await #expect(throws: (any Error).self) { try await reader.childValue }
            await eventually { server.openConnectionCount == 0 }
        }
    }

    @Test("the operation ID names the request for instruments")
    func operationIDReachesInstruments() async throws {
        try await withServer { server in
            let recorder = NameRecorder()
            let session = Session(instruments: [recorder])
            _ = try await client(server, session: session).getItem(path: .init(itemID: "1"))
            #expect(recorder.names.withLock { $0 } == ["getItem"])
        }
    }
}


/// What the transport must never do quietly: end a body early as if it were whole, or merge
/// header fields into something the server reads differently.
@Suite("BrickRequestTransport: bodies end whole or with an error; fields keep their meaning", .timeLimit(.minutes(2)))
struct OpenAPITransportFaultTests {
    /// Sends `GET path` straight through a transport and collects the body.
    private func get(
        _ server: BrickTestServer,
        _ path: String,
        headers: HTTPFields = [:],
        retry: AutoRetryConfiguration = AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: 1)
    ) async throws -> (HTTPResponse, [UInt8]) {
        let transport = BrickRequestTransport(session: Session(), configuration: .init(retry: retry))
        var request = HTTPRequest(method: .get, scheme: nil, authority: nil, path: path)
        request.headerFields = headers
        let (response, body) = try await transport.send(
            request,
            body: nil,
            baseURL: try #require(URL(string: server.baseURL)),
            operationID: "probe"
        )
        let bytes = try await [UInt8](collecting: try #require(body), upTo: 64 << 20)
        return (response, bytes)
    }

    @Test("the last of two retryable 503s with 3 MiB bodies: the body is delivered whole, or its iteration throws; never cut short and ended normally")
    func largeProvisionalBody() async throws {
        try await withServer { server in
            let large = [UInt8](repeating: UInt8(ascii: "e"), count: 3 << 20)
            server.script("/big", [.respond(status: 503, body: large), .respond(status: 503, body: large)])
            do {
                let (response, bytes) = try await get(server, "/big")
                #expect(response.status == .serviceUnavailable)
                #expect(bytes.count == large.count, "a body of \(large.count) bytes ended normally after \(bytes.count)")
            } catch let error as BrickError {
                #expect(error.code == .invalidResponse, "\(error)")
                #expect(error.message.contains("1 MiB") || error.message.contains("1048576"), "\(error)")
            }
            #expect(server.requests(path: "/big").count == 2)
        }
    }

    @Test("a body the server cuts after the head was handed over ends with connectionLost, not cancelled")
    func bodyCutByServer() async throws {
        try await withServer { server in
            server.script("/bytes/3000000", [.routeCutAfter(bodyBytes: 100_000)])
            do {
                let (_, bytes) = try await get(server, "/bytes/3000000")
                Issue.record("a cut body ended normally after \(bytes.count) bytes")
            } catch let error as BrickError {
                #expect(error.code == .connectionLost, "\(error)")
            }
        }
    }

    @Test("two Cookie fields reach the server as one field joined with '; ' (RFC 6265 §5.4)")
    func cookiesJoined() async throws {
        try await withServer { server in
            var headers = HTTPFields()
            headers.append(HTTPField(name: .cookie, value: "a=1"))
            headers.append(HTTPField(name: .cookie, value: "b=2"))
            headers.append(HTTPField(name: .accept, value: "text/plain"))
            headers.append(HTTPField(name: .accept, value: "application/json"))
            _ = try await get(server, "/get", headers: headers)
            let request = try #require(server.requests(path: "/get").first)
            #expect(request.header("Cookie") == "a=1; b=2")
            #expect(request.header("Accept") == "text/plain, application/json")
        }
    }
}

/// Records the operation name of every request it sees.
private final class NameRecorder: RequestInstrument {
    let names = Lock<[String?]>([])

    func observe(_ request: TransportRequest, operation: String?) -> (any RequestObserver)? {
        names.withLock { $0.append(operation) }
        return nil
    }
}
