import BrickRequest
import BrickTestSupport
import Foundation
import Glibc
import Testing

/// The hostile HTTP/2 server (`HTTP2/hostile-h2-server.py`, Python's `h2` over TLS with ALPN h2),
/// started for a suite with a certificate of its own, and its event log.
final class HostileHTTP2Server: Sendable {
    let directory: String
    let caFile: String
    /// A plain server (faults chosen by the path).
    let port: Int
    /// A server announcing SETTINGS_MAX_CONCURRENT_STREAMS 1.
    let limitedPort: Int
    /// A server that never opens a flow-control window.
    let windowZeroPort: Int
    private let pid: Int32

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("HTTP2/hostile-h2-server.py").path

    init() throws {
        directory = NSTemporaryDirectory() + "brick-h2-faults-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        caFile = directory + "/cert.pem"
        let d = directory
        try NginxFixture.shell(
            """
            set -e
            cd '\(d)'
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out cert.pem \\
              -days 2 -subj '/CN=localhost' -addext 'subjectAltName=IP:127.0.0.1,DNS:localhost' 2>/dev/null
            """
        )
        let output = try NginxFixture.shell(
            "python3 '\(Self.script)' '\(d)/cert.pem' '\(d)/key.pem' '\(d)/events.log' > '\(d)/ports' 2>'\(d)/stderr' "
                + "</dev/null & echo $!"
        )
        guard let pid = Int32(output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw NginxFixture.FixtureError(message: "the HTTP/2 server did not start: \(output)")
        }
        self.pid = pid
        let deadline = Date().addingTimeInterval(20)
        var ports: [Int] = []
        while ports.count != 3 {
            let text = (try? String(contentsOfFile: d + "/ports", encoding: .utf8)) ?? ""
            if text.hasPrefix("ready ") {
                ports = text.dropFirst(6).split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
            }
            if ports.count == 3 { break }
            guard Date() < deadline else {
                kill(pid, SIGKILL)
                let errors = (try? String(contentsOfFile: d + "/stderr", encoding: .utf8)) ?? ""
                throw NginxFixture.FixtureError(message: "the HTTP/2 server did not start (is python3-h2 there?): \(errors)")
            }
            usleep(20_000)
        }
        (port, limitedPort, windowZeroPort) = (ports[0], ports[1], ports[2])
    }

    /// Every line the server logged so far.
    var events: [String] {
        ((try? String(contentsOfFile: directory + "/events.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map(String.init)
    }

    /// The events of one kind (`processed`, `refused`, …), without the kind.
    func events(_ kind: String) -> [String] {
        events.filter { $0.hasPrefix(kind + " ") }.map { String($0.dropFirst(kind.count + 1)) }
    }

    /// How often the server processed request `id`, and on which connections.
    func processed(_ id: String) -> [String] {
        events("processed").filter { $0.hasPrefix(id + " ") }.map { String($0.split(separator: " ")[1]) }
    }

    /// A session trusting the server's certificate, negotiating HTTP/2.
    func session(_ configure: (inout Session.Configuration) -> Void = { _ in }) -> Session {
        var configuration = Session.Configuration()
        configuration.transport.tls.caFile = caFile
        configure(&configuration)
        return Session(configuration: configuration)
    }

    func url(_ path: String, port: Int? = nil) -> String { "https://127.0.0.1:\(port ?? self.port)\(path)" }

    deinit {
        kill(pid, SIGKILL)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A request of any method to the hostile server, with a small JSON body for a POST, the
/// session's default retries unless given, and an `Idempotency-Key` when asked.
private final class H2Call: Component, ValidatedResponseType, DataResponseType, JSONBodyRequestType {
    struct Payload: Encodable, Sendable { let id: String }
    let session: Session
    let urlString: String
    let method: HTTPRequest.Method
    let autoRetryConfiguration: AutoRetryConfiguration
    let jsonBody: Payload?
    let idempotencyKey: String?
    var parameterEncoding: ParameterEncoding { method == .post ? .json : .automatic }
    init(
        _ url: String,
        method: HTTPRequest.Method = .post,
        session: Session,
        retry: AutoRetryConfiguration = .init(breakTime: .milliseconds(50), maxRetryCount: 3),
        key: String? = nil
    ) {
        self.urlString = url
        self.method = method
        self.session = session
        self.autoRetryConfiguration = retry
        self.jsonBody = method == .post ? Payload(id: url) : nil
        self.idempotencyKey = key
        super.init()
    }
}

@Suite("HTTP/2 faults from a hostile server: GOAWAY, stream resets, limits, floods", .timeLimit(.minutes(3)))
struct HTTP2FaultTests {
    let server: HostileHTTP2Server

    init() async throws {
        server = try await Subprocess.offPool { try HostileHTTP2Server() }
    }

    @Test("GOAWAY with a last stream id: the streams below it complete, those above go again on a new connection")
    func goaway() async throws {
        let session = server.session()
        // One connection first, so that the six requests are multiplexed on it. (A POST without an
        // `Idempotency-Key` always gets a connection of its own: see the next test.)
        let warm = await H2Call(server.url("/echo/warm"), method: .get, session: session).response()
        #expect(warm.value.map { String(decoding: $0, as: UTF8.self) } == "warm:0")
        let results = await withTaskGroup(of: (Int, Response<Data, BrickError>).self) { group in
            for index in 0..<6 {
                group.addTask {
                    let url = server.url("/goaway/g1/6/2/g\(index)")
                    let call = index % 2 == 0
                        ? H2Call(url, method: .get, session: session)
                        : H2Call(url, session: session, key: "goaway-g\(index)")
                    return (index, await call.response())
                }
            }
            var all: [Int: Response<Data, BrickError>] = [:]
            for await (index, response) in group { all[index] = response }
            return all
        }
        for index in 0..<6 {
            guard let response = results[index] else { continue }
            #expect(response.error == nil, "g\(index): \(String(describing: response.error))")
            #expect(response.value.map { String(decoding: $0, as: UTF8.self).hasPrefix("g\(index):") } == true)
            #expect(server.processed("g\(index)").count == 1, "g\(index) processed \(server.processed("g\(index)"))")
        }
        let dropped = server.events("goaway-dropped")
        #expect(dropped.count == 4, "\(server.events)")
        #expect(server.events("goaway-sent").count == 1)
        let goawayConnection = try #require(server.processed("warm").first)
        for id in dropped {
            #expect(server.processed(id).allSatisfy { $0 != goawayConnection }, "\(id) was answered on the closed connection")
        }
    }

    @Test("GOAWAY with last stream id 0 before the request was processed: a GET or a keyed POST goes again, once", arguments: [false, true])
    func goawayBeforeProcessing(keyed: Bool) async throws {
        let session = server.session()
        let id = keyed ? "z1" : "z2"
        let url = server.url("/goaway/\(id)/1/0/\(id)")
        let call = keyed ? H2Call(url, session: session, key: "order-\(id)") : H2Call(url, method: .get, session: session)
        let response = await call.response()
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(server.events("goaway-dropped").contains(id))
        #expect(server.processed(id).count == 1)
    }

    /// libcurl 7.88 does not say which stream a GOAWAY covered when it ends the transfer itself
    /// (`CURLE_HTTP2`, no message): a POST without a key has an unknown outcome, so it is not sent
    /// again (RELIABILITY.md: give it an `Idempotency-Key`).
    @Test("GOAWAY with last stream id 0 before a POST without a key was processed: a lost exchange, not sent again")
    func goawayUnkeyedPOST() async throws {
        let session = server.session()
        let response = await H2Call(server.url("/goaway/u1/1/0/u1"), session: session).response()
        let error = try #require(response.error)
        #expect(error.transportError?.kind == .connectionReset, "\(error)")
        #expect(response.retryCount == 0)
        #expect(server.events("goaway-dropped") == ["u1"])
        #expect(server.processed("u1").isEmpty)
    }

    @Test("RST_STREAM REFUSED_STREAM: the request goes again, a POST without a key included, and is processed once")
    func refusedStream() async throws {
        let session = server.session()
        let response = await H2Call(server.url("/refuse/r1/1/r1"), session: session).response()
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(response.value.map { String(decoding: $0, as: UTF8.self).hasPrefix("r1:") } == true)
        #expect(server.events("refused") == ["r1"])
        #expect(server.processed("r1").count == 1)
    }

    @Test("REFUSED_STREAM on each of libcurl's six tries: a POST without a key is reported unprocessed, and goes again")
    func refusedEveryTry() async throws {
        let session = server.session()
        // libcurl sends a refused stream again itself, five times, then gives up: the server was
        // never given the request, so the retry policy may send it again though it has no key.
        let retried = await H2Call(server.url("/refuse/r6/6/r6"), session: session).response()
        #expect(retried.error == nil, "\(String(describing: retried.error))")
        #expect(retried.retryCount == 1)
        #expect(server.events("refused") == Array(repeating: "r6", count: 6))
        #expect(server.processed("r6").count == 1)

        let unretried = await H2Call(server.url("/refuse/n6/6/n6"), session: session, retry: .none).response()
        let error = try #require(unretried.error)
        #expect(error.transportError?.kind == .connectionReset, "\(error)")
        #expect(error.transportError?.requestBytesSent == false, "\(error)")
        #expect(error.message.contains("REFUSED_STREAM"), "\(error.message)")
        #expect(server.events("refused").filter { $0 == "n6" }.count == 6)
        #expect(server.processed("n6").isEmpty)
    }

    @Test("RST_STREAM INTERNAL_ERROR mid-body: a POST without a key fails and is not sent again")
    func internalErrorPOST() async throws {
        let session = server.session()
        let response = await H2Call(server.url("/reset-mid-body/p1/10/p1"), session: session).response()
        let error = try #require(response.error)
        #expect(error.transportError?.kind == .connectionReset, "\(error)")
        #expect(error.message.contains("INTERNAL_ERROR"), "\(error.message)")
        #expect(response.retryCount == 0)
        #expect(server.events("reset") == ["p1"])
    }

    @Test("RST_STREAM INTERNAL_ERROR mid-body: a GET, or a POST with a key, is retried and succeeds", arguments: [false, true])
    func internalErrorRetried(keyed: Bool) async throws {
        let session = server.session()
        let id = keyed ? "k1" : "q1"
        let call = keyed
            ? H2Call(server.url("/reset-mid-body/\(id)/1/\(id)"), session: session, key: "order-\(id)")
            : H2Call(server.url("/reset-mid-body/\(id)/1/\(id)"), method: .get, session: session)
        let response = await call.response()
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(response.retryCount == 1)
        #expect(server.events("reset") == [id])
        #expect(server.processed(id).count == 1)
    }

    @Test("SETTINGS_MAX_CONCURRENT_STREAMS 1: 50 concurrent requests all complete, never two streams at once, each processed once")
    func maxConcurrentStreams() async throws {
        let session = server.session()
        let failures = await withTaskGroup(of: String?.self) { group in
            for index in 0..<50 {
                group.addTask {
                    let response = await H2Call(
                        server.url("/limited/m\(index)", port: server.limitedPort),
                        method: index % 2 == 0 ? .get : .post,
                        session: session
                    ).response()
                    return response.error.map { "m\(index): \($0)" }
                }
            }
            var all: [String] = []
            for await failure in group { if let failure { all.append(failure) } }
            return all
        }
        #expect(failures.isEmpty, "\(failures)")
        #expect(server.events("too-many-streams").isEmpty)
        let most = server.events("concurrent-max").compactMap { Int($0.split(separator: " ")[1]) }.max()
        #expect(most == 1)
        // Streams opened before the client read the limit are refused and go again; after it, none.
        // (Each new connection is such a burst: libcurl opens one per request the full ones cannot
        // take, and the requests waiting for it all go on it. A request refused on six of them in a
        // row is given up by libcurl and sent again by the retry policy, unprocessed.)
        #expect(server.events("refused-over-limit").allSatisfy { $0.hasSuffix("acked=False") }, "\(server.events)")
        for index in 0..<50 { #expect(server.processed("m\(index)").count == 1) }
    }

    @Test("a flow-control window left at 0: the idle timeout ends the request, which says so")
    func windowLeftAtZero() async throws {
        let session = server.session { $0.transport.idleTimeout = .seconds(1) }
        final class Upload: Component, POSTRequestType, NonAutoRetryType, DataResponseType {
            let session: Session
            let urlString: String
            let body: Data
            var requestBody: RequestBody? { .data(body) }
            init(_ url: String, session: Session) {
                self.urlString = url
                self.session = session
                self.body = Data(repeating: 0x61, count: 1 << 20)
                super.init()
            }
        }
        let response = await Upload(server.url("/echo/w1", port: server.windowZeroPort), session: session).response()
        let error = try #require(response.error)
        #expect(error.code == .timedOut, "\(error)")
        #expect(error.message.contains("idle timeout"), "\(error.message)")
        #expect(server.processed("w1").isEmpty)
    }

    @Test("a response header list of 600 KiB: an invalid response, not retried")
    func hugeHeaderList() async throws {
        let session = server.session()
        let response = await H2Call(server.url("/huge-headers"), method: .get, session: session).response()
        let error = try #require(response.error)
        #expect(error.code == .invalidResponse, "\(error)")
        #expect(response.retryCount == 0)
    }

    @Test("a PING flood and a CONTINUATION flood: the connection is dropped, memory stays bounded", arguments: ["ping", "continuation"])
    func flood(kind: String) async throws {
        let output = try await Subprocess.run(
            "'\(LargeDownloadMemoryTests.probePath)' h2-flood '\(server.url("/\(kind)-flood"))' '\(server.caFile)'"
        )
        var fields: [String: String] = [:]
        for field in output.split(whereSeparator: \.isWhitespace) {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        // A CONTINUATION flood is nghttp2's refusal (-905): the server broke HTTP/2. A PING flood
        // shows as the connection failing (libcurl: "Failed sending data to the peer", the
        // server reads nothing): a lost connection.
        #expect(fields["error"] == (kind == "ping" ? "connectionReset" : "invalidResponse"), "\(output)")
        let before = try #require(fields["before"].flatMap(Int.init))
        let peak = try #require(fields["peak"].flatMap(Int.init))
        #expect(peak - before < 32 << 20, "\(output)")
        // The server logs its flood once a write fails: after the client went, not before.
        await eventually { server.events("flood").contains { $0.hasPrefix(kind + " ") } }
    }
}
