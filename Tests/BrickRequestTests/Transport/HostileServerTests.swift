import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

/// Servers that break HTTP on purpose (a hostile peer's probes), each as exact bytes from the test
/// server: no response may reach a request it does not answer, no failure may pass for success,
/// and no claim of the server's may size the client's memory.
@Suite("CurlTransport against hostile servers", .timeLimit(.minutes(2)))
struct HostileServerTests {
    /// A complete response smuggled after an answer: what a desynchronised client would deliver
    /// as the next request's response.
    static let smuggled = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nPOISON"

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Sends `first`, then two GETs of `/get` on the same transport, and checks that both are
    /// answered by `/get` itself, on a connection other than the poisoned one.
    static func expectNoDesync(
        server: BrickTestServer,
        first: TransportRequest,
        pause: Duration = .zero
    ) async throws {
        let transport = CurlTransport()
        let firstResult = await transport.result(first)
        #expect(firstResult.failure == nil, "\(String(describing: firstResult.failure))")
        if pause > .zero {
            // Once the server has written the push (on loopback the bytes are then in the client's
            // socket), and a little longer.
            await eventually { server.pushCount == 1 }
            try await Task.sleep(for: pause)
        }
        for index in 1...2 {
            let response = try await transport.send(try get(server.baseURL + "/get?n=\(index)"))
            let body = String(decoding: response.body ?? Data(), as: UTF8.self)
            #expect(response.status == .ok)
            #expect(!body.contains("POISON"), "request \(index) got the smuggled response")
            #expect(try json(response.body)["args"] as? [String: String] == ["n": "\(index)"])
        }
        // The poisoned connection was not reused: the two GETs went out on a new one.
        let gets = server.requests(path: "/get")
        let firstConnection = try #require(server.requests.first?.connection)
        #expect(gets.count == 2)
        #expect(gets.allSatisfy { $0.connection != firstConnection }, "\(server.requests.map { ($0.uri, $0.connection) })")
    }

    // MARK: D2 — desync on a reused connection

    @Test(
        "a body after a 204, or after a HEAD response, does not become the next request's response",
        arguments: [
            ("GET", "HTTP/1.1 204 No Content\r\n\r\n"),
            ("HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n"),
        ]
    )
    func bodyAfterBodilessResponse(_ method: String, _ head: String) async throws {
        try await withServer { server in
            // The smuggled bytes come as the server's second write, once the client has the head.
            // 100 ms later: a client slowed by a loaded machine must not read both in one `recv`
            // (libcurl then drops the extra bytes itself and rightly keeps the connection, which
            // this test, about bytes that arrive later, would misread as a reuse).
            server.script(
                "/first",
                [
                    .pushAfterResponse(
                        .rawKeepingConnection(Self.bytes(head)),
                        bytes: Self.bytes(Self.smuggled),
                        delay: .milliseconds(100)
                    )
                ]
            )
            let request = try TransportRequest(method: HTTPRequest.Method(method)!, url: server.baseURL + "/first")
            try await Self.expectNoDesync(server: server, first: request, pause: .milliseconds(200))
        }
    }

    @Test("bytes after a 204 or a HEAD response in the same write reach no later request")
    func extraBytesInTheSameWrite() async throws {
        try await withServer { server in
            server.script(
                "/nothing",
                [.rawKeepingConnection(Self.bytes("HTTP/1.1 204 No Content\r\n\r\n" + Self.smuggled))]
            )
            server.script(
                "/head",
                [.rawKeepingConnection(Self.bytes("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n" + Self.smuggled))]
            )
            let transport = CurlTransport()
            _ = try await transport.send(try get(server.baseURL + "/nothing"))
            _ = try await transport.send(try TransportRequest(method: .head, url: server.baseURL + "/head"))
            for index in 1...3 {
                let response = try await transport.send(try get(server.baseURL + "/get?n=\(index)"))
                #expect(try json(response.body)["args"] as? [String: String] == ["n": "\(index)"])
            }
        }
    }

    @Test("an unsolicited response pushed on an idle connection is not taken for the next answer")
    func unsolicitedResponse() async throws {
        try await withServer { server in
            server.script(
                "/first",
                [.pushAfterResponse(.ok("first"), bytes: Self.bytes(Self.smuggled), delay: .milliseconds(100))]
            )
            try await Self.expectNoDesync(
                server: server,
                first: try get(server.baseURL + "/first"),
                pause: .milliseconds(200)
            )
        }
    }

    @Test("a clean kept-alive connection is still reused")
    func cleanConnectionReused() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let first = try await transport.send(try get(server.baseURL + "/get"))
            let second = try await transport.send(try get(server.baseURL + "/get"))
            #expect(!first.metrics.connectionReused)
            #expect(second.metrics.connectionReused)
            #expect(server.connectionCount == 1)
        }
    }

    // MARK: D3 — a header block cut off

    @Test(
        "a response header cut off by the peer fails as a lost connection",
        arguments: ["HTTP/1.1 200 OK\r\nX-Slow: zz", "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\nX-Slow: zz\r\n"]
    )
    func truncatedHeader(_ bytes: String) async throws {
        try await withServer { server in
            server.script("/cut", [.raw(Self.bytes(bytes))])
            let result = await CurlTransport().result(try get(server.baseURL + "/cut"))
            let error = try #require(result.failure)
            #expect(error.kind == .connectionReset)
            #expect(error.requestBytesSent)
            #expect(error.message.contains("before the response header was complete"))
        }
    }

    @Test("a cut-off header is retried for an idempotent request, and a download's file is never touched")
    func truncatedHeaderRetriedAndFileKept() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let cut = ScriptedResponse.raw(Self.bytes("HTTP/1.1 200 OK\r\nX-Slow: zz"))
                server.script("/get", [cut])
                let clock = ManualClock()
                let session = Session(clock: clock)
                let task = Task {
                    await SessionGetRetrying(url: server.baseURL + "/get", session: session).response()
                }
                await eventually { clock.waiterCount == 1 }
                clock.advance(by: .seconds(1))
                let response = await task.childValue
                #expect(response.status == .ok)
                #expect(response.retryCount == 1)
                #expect(server.requests(path: "/get").count == 2)

                // A download: the old file stays as it was, and no partial file is left.
                let file = URL(fileURLWithPath: directory + "/backup.tar")
                try Data("yesterday".utf8).write(to: file)
                server.script("/backup", [cut])
                let download = await Download(server.baseURL + "/backup", to: file, session: Session()).response()
                #expect(download.error?.code == .connectionLost)
                #expect(try Data(contentsOf: file) == Data("yesterday".utf8))
                #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["backup.tar"])
            }
        }
    }

    // MARK: D7 — protocol violations are not lost connections

    @Test("malformed chunked framing is an invalid response, not a lost connection")
    func malformedChunks() async throws {
        try await withServer { server in
            let bytes = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
            server.script("/chunks", [.raw(Self.bytes(bytes))])
            let error = try #require(await CurlTransport().result(try get(server.baseURL + "/chunks")).failure)
            #expect(error.kind == .invalidResponse, "\(error)")
            #expect(error.message.contains("chunked"))
            let verdict = RetryClassification.verdict(for: error, isIdempotent: true).verdict
            #expect(verdict == .fatal)
        }
    }

    @Test("a header line over 100 KiB, or a header block over 256 KiB, is an invalid response")
    func oversizedHeaders() async throws {
        try await withServer { server in
            let longLine = "HTTP/1.1 200 OK\r\nX-Long: " + String(repeating: "a", count: 110_000) + "\r\n\r\n"
            var manyLines = "HTTP/1.1 200 OK\r\n"
            for index in 0..<400 { manyLines += "X-Line-\(index): " + String(repeating: "b", count: 1000) + "\r\n" }
            manyLines += "Content-Length: 0\r\n\r\n"
            server.script("/long", [.raw(Self.bytes(longLine))])
            server.script("/many", [.raw(Self.bytes(manyLines))])
            let transport = CurlTransport()
            let line = try #require(await transport.result(try get(server.baseURL + "/long")).failure)
            let block = try #require(await transport.result(try get(server.baseURL + "/many")).failure)
            #expect(line.kind == .invalidResponse, "\(line)")
            #expect(line.message.contains("header line"))
            #expect(block.kind == .invalidResponse, "\(block)")
            #expect(block.message.contains("header block"))
        }
    }

    // MARK: D8 — only the first line of a block is a status line

    @Test("a field named like a status line does not start a new header block")
    func statusLookalikeField() async throws {
        try await withServer { server in
            let conflicting = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nHTTP/1.1: 200\r\nContent-Length: 6\r\n\r\nhello!"
            let kept = "HTTP/1.1 200 OK\r\nX-First: a\r\nHTTP/1.1: 200\r\nContent-Length: 5\r\n\r\nhello"
            server.script("/conflicting", [.raw(Self.bytes(conflicting))])
            server.script("/kept", [.raw(Self.bytes(kept))])
            let transport = CurlTransport()
            let error = try #require(await transport.result(try get(server.baseURL + "/conflicting")).failure)
            #expect(error.kind == .invalidResponse)
            #expect(error.message.contains("conflicting Content-Length"))
            let response = try await transport.send(try get(server.baseURL + "/kept"))
            #expect(response.headerFields[HTTPField.Name("X-First")!] == "a")
            #expect(response.body == Data("hello".utf8))
        }
    }

    // MARK: D9 — huge timeouts

    @Test("timeouts of .seconds(Int64.max) mean never, not a crash")
    func hugeTimeouts() async throws {
        try await withServer { server in
            let transport = curlTransport {
                $0.connectTimeout = .seconds(Int64.max)
                $0.requestTimeout = .seconds(Int64.max)
                $0.idleTimeout = .seconds(Int64.max)
            }
            var options = TransportRequest.Options()
            options.timeout = .seconds(Int64.max)
            let response = try await transport.send(try get(server.baseURL + "/get", options: options))
            #expect(response.status == .ok)
            #expect(transport.cURLDescription(for: try get(server.baseURL + "/get", options: options)).contains("--max-time"))
        }
    }

    @Test(
        "Duration conversions saturate",
        arguments: [
            (Duration.seconds(Int64.max), Duration.maxMilliseconds),
            (.seconds(-5), 0),
            (.milliseconds(1500), 1500),
            (.nanoseconds(999_999), 0),
            (.seconds(1 << 40), Duration.maxMilliseconds),
        ]
    )
    func saturatingMilliseconds(_ duration: Duration, _ expected: Int) {
        #expect(duration.milliseconds() == expected)
    }
}

/// A GET that retries once after a second on a lost connection.
final class SessionGetRetrying: Component, GETRequestType, DataResponseType {
    let urlString: String
    let session: Session
    var autoRetryConfiguration: AutoRetryConfiguration { AutoRetryConfiguration(breakTime: .seconds(1), maxRetryCount: 1) }
    init(url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}
