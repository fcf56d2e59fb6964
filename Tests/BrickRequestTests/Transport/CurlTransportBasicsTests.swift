@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import HTTPTypes
import Synchronization
import Testing

@Suite("CurlTransport: methods, bodies, progress", .timeLimit(.minutes(2)))
struct CurlTransportBasicsTests {
    let transport = CurlTransport()

    @Test(
        "every method reaches the server with its body",
        arguments: [
            HTTPRequest.Method.get, .post, .put, .patch, .delete, .options,
        ]
    )
    func methods(method: HTTPRequest.Method) async throws {
        try await withServer { server in
            let hasBody = method != .get
            let request = try TransportRequest(
                method: method,
                url: server.baseURL + "/anything/x?a=1&a=2",
                headers: [("Content-Type", "text/plain"), ("X-Trace", "t1")],
                body: hasBody ? .data(Data("hello \(method)".utf8)) : nil
            )
            let response = try await transport.send(request)
            #expect(response.status == .ok)
            let echo = try json(response.body)
            #expect(echo["method"] as? String == method.rawValue)
            #expect(echo["args"] as? [String: [String]] == ["a": ["1", "2"]])
            let recorded = try #require(server.requests.last)
            #expect(recorded.method == method.rawValue)
            #expect(recorded.uri == "/anything/x?a=1&a=2")
            #expect(recorded.header("X-Trace") == "t1")
            #expect(recorded.body == (hasBody ? Array("hello \(method)".utf8) : []))
            if hasBody {
                #expect(recorded.header("Content-Length") == String("hello \(method)".utf8.count))
                #expect(recorded.header("Expect") == nil)
            }
        }
    }

    @Test("HEAD gets the head and no body")
    func head() async throws {
        try await withServer { server in
            let response = try await transport.send(
                try TransportRequest(method: .head, url: server.baseURL + "/bytes/100")
            )
            #expect(response.status == .ok)
            #expect(response.headerFields[.contentLength] == "100")
            #expect(response.body?.isEmpty == true)
        }
    }

    @Test("a body streams from disk, and from several segments in order")
    func bodyFromFile() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/upload.bin"
                let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                try Data(bytes).write(to: URL(fileURLWithPath: path))
                let body = RequestBody(segments: [
                    .data(Data("head-".utf8)), .file(path: path), .data(Data("-tail".utf8)),
                ])
                let response = try await transport.send(
                    try TransportRequest(method: .put, url: server.baseURL + "/status/200", body: body)
                )
                #expect(response.status == .ok)
                #expect(response.metrics.bytesSent == Int64(bytes.count + 10))
                #expect(server.requests.last?.body == Array("head-".utf8) + bytes + Array("-tail".utf8))
            }
        }
    }

    @Test("a missing body file fails before anything is sent")
    func missingBodyFile() async throws {
        try await withServer { server in
            let result = await transport.result(
                try TransportRequest(
                    method: .post,
                    url: server.baseURL + "/post",
                    body: .file(path: "/nonexistent/file")
                )
            )
            #expect(result.failure?.kind == .fileIO)
            #expect(result.failure?.requestBytesSent == false)
            #expect(server.requestCount == 0)
        }
    }

    @Test("a response body streams to a file")
    func responseToFile() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/download.bin"
                let response = try await transport.send(
                    try get(server.baseURL + "/bytes/200000", options: .init(destination: .file(path: path)))
                )
                #expect(response.body == nil)
                #expect(response.bodyFile == path)
                let written = try Data(contentsOf: URL(fileURLWithPath: path))
                #expect(Array(written) == (0..<200_000).map { UInt8(truncatingIfNeeded: $0) })
            }
        }
    }

    @Test("upload and download progress reach their totals")
    func progress() async throws {
        try await withServer { server in
            let seen = Lock<[TransportRequest.Progress]>([])
            let upload = Data(repeating: 0x41, count: 100_000)
            let options = TransportRequest.Options(progress: { progress in seen.withLock { $0.append(progress) } })
            _ = try await transport.send(
                try TransportRequest(
                    method: .post,
                    url: server.baseURL + "/bytes/150000",
                    body: .data(upload),
                    options: options
                )
            )
            let last = try #require(seen.withLock { $0.last })
            #expect(last.bytesSent == 100_000)
            #expect(last.totalBytesExpectedToSend == 100_000)
            #expect(last.bytesReceived == 150_000)
            #expect(last.totalBytesExpectedToReceive == 150_000)
        }
    }

    @Test("responses keep raw headers and parse them on demand")
    func headers() async throws {
        try await withServer { server in
            let response = try await transport.send(
                try get(server.baseURL + "/response-headers?X-One=1&X-Two=two%20words")
            )
            #expect(response.headerFields[HTTPField.Name("X-One")!] == "1")
            #expect(response.headerFields[HTTPField.Name("X-Two")!] == "two words")
            #expect(String(decoding: response.rawHeaders, as: UTF8.self).contains("X-One: 1\r\n"))
        }
    }

    @Test("a header block of many kilobytes arrives whole; the next responses have only their own headers")
    func largeHeaderBlock() async throws {
        try await withServer { server in
            // Over 16 KiB: the handle's header buffer grows, then shrinks back for the next transfer.
            let values = (0..<80).map { "value-\($0)-" + String(repeating: "x", count: 200) }
            let query = values.enumerated().map { "X-Big-\($0.offset)=\($0.element)" }.joined(separator: "&")
            let response = try await transport.send(try get(server.baseURL + "/response-headers?" + query))
            #expect(response.rawHeaders.count > 16_384)
            for (index, value) in values.enumerated() {
                #expect(response.headerFields[HTTPField.Name("X-Big-\(index)")!] == value)
            }
            let redirected = try await transport.send(try get(server.baseURL + "/redirect/2"))
            #expect(redirected.status == .ok)
            #expect(redirected.headerFields[.location] == nil)
            #expect(redirected.headerFields[values: .contentLength].count == 1)
            let small = try await transport.send(try get(server.baseURL + "/response-headers?X-Small=1"))
            #expect(small.headerFields[HTTPField.Name("X-Small")!] == "1")
            #expect(small.headerFields[HTTPField.Name("X-Big-0")!] == nil)
            #expect(small.rawHeaders.count < 1_000)
        }
    }

    @Test("metrics describe the transfer")
    func metrics() async throws {
        try await withServer { server in
            let first = try await transport.send(try get(server.baseURL + "/bytes/5000"))
            let second = try await transport.send(try get(server.baseURL + "/bytes/5000"))
            #expect(first.metrics.httpVersion == .http1_1)
            #expect(first.metrics.connectionReused == false)
            #expect(second.metrics.connectionReused == true)
            #expect(first.metrics.bytesReceived == 5000)
            #expect(first.metrics.requestHeaderBytes > 0)
            #expect(first.metrics.total >= first.metrics.firstByte)
            #expect(first.metrics.firstByte >= first.metrics.connect)
            #expect(first.metrics.connect > .zero)
        }
    }
}

@Suite("CurlTransport: cURLDescription", .timeLimit(.minutes(2)))
struct CurlDescriptionTests {
    @Test("the description shows method, limits and TLS settings")
    func settings() throws {
        var configuration = CurlTransport.Configuration()
        configuration.tls.caFile = "/etc/ca.pem"
        configuration.tls.pinnedPublicKeys = ["sha256//abc="]
        configuration.proxy = .none
        let request = try TransportRequest(
            method: .delete,
            url: "https://api.example.com/items/1",
            options: .init(timeout: .milliseconds(1500))
        )
        let command = CurlTransport(configuration: configuration).cURLDescription(for: request)
        #expect(command.hasPrefix("curl -X DELETE 'https://api.example.com/items/1'"))
        #expect(command.contains("--max-time 1.500"))
        #expect(command.contains("--cacert '/etc/ca.pem'"))
        #expect(command.contains("--pinnedpubkey 'sha256//abc='"))
        #expect(command.contains("--max-redirs 10 --proto-redir =https"))
        #expect(command.contains("--proxy ''"))
        // Milliseconds keep their leading zeros: 1.050 s, not 1.50.
        let short = try TransportRequest(
            method: .get,
            url: "http://127.0.0.1/",
            options: .init(timeout: .milliseconds(1050))
        )
        #expect(CurlTransport(configuration: configuration).cURLDescription(for: short).contains("--max-time 1.050 "))
    }

    @Test("bodies: printable text in single quotes, anything else byte by byte as $'\\xHH'")
    func bodies() throws {
        let transport = CurlTransport(configuration: .init())
        let text = try TransportRequest(method: .post, url: "http://127.0.0.1/", body: .data(Data("it's".utf8)))
        #expect(transport.cURLDescription(for: text).contains(#"--data-binary 'it'\''s'"#))
        let binary = try TransportRequest(
            method: .post,
            url: "http://127.0.0.1/",
            body: .data(Data([0x00, 0x0A, 0xFF]))
        )
        #expect(transport.cURLDescription(for: binary).contains(#"--data-binary $'\x00\x0a\xff'"#))
    }
}
