@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import HTTPTypes
import Synchronization
import Testing

/// What a ``ResponseBodyStream`` was handed, piece by piece.
final class Pieces: Sendable {
    private final class Received: Sendable {
        let pieces = Lock<[[UInt8]]>([])
    }

    private let received = Received()
    let stream: ResponseBodyStream

    /// - Parameter limit: Pieces to accept before answering `false`; `nil` accepts all.
    init(acceptingAtMost limit: Int? = nil) {
        let received = self.received
        stream = ResponseBodyStream { bytes in
            received.pieces.withLock { pieces in
                pieces.append(Array(bytes))
                return limit.map { pieces.count < $0 } ?? true
            }
        }
    }

    var count: Int { received.pieces.withLock { $0.count } }
    var bytes: [UInt8] { received.pieces.withLock { $0.flatMap { $0 } } }
}

@Suite("CurlTransport: response bodies streamed to a receiver", .timeLimit(.minutes(2)))
struct CurlTransportStreamTests {
    let transport = CurlTransport()

    /// The bytes of the test server's `/bytes` and `/stream-bytes` routes.
    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0) } }

    @Test("a chunked body reaches the stream piece by piece, whole and in order, and is not collected")
    func piecesInOrder() async throws {
        try await withServer { server in
            let pieces = Pieces()
            let response = try await transport.send(
                try get(
                    server.baseURL + "/stream-bytes/300000?chunk_size=10000",
                    options: .init(destination: .stream(pieces.stream))
                )
            )
            #expect(response.status == .ok)
            #expect(response.body == nil)
            #expect(response.bodyFile == nil)
            #expect(pieces.count > 1)
            #expect(pieces.bytes == Self.pattern(300_000))
            #expect(response.metrics.bytesReceived == 300_000)
        }
    }

    @Test("the stream gets the decoded body of a gzip response")
    func decoded() async throws {
        try await withServer { server in
            let pieces = Pieces()
            let response = try await transport.send(
                try get(server.baseURL + "/gzip", options: .init(destination: .stream(pieces.stream)))
            )
            #expect(response.status == .ok)
            let echo = try json(Data(pieces.bytes))
            #expect(echo["gzipped"] as? Bool == true)
        }
    }

    @Test("after redirects the stream gets the final response's body only")
    func afterRedirects() async throws {
        try await withServer { server in
            let pieces = Pieces()
            let response = try await transport.send(
                try get(server.baseURL + "/redirect/2", options: .init(destination: .stream(pieces.stream)))
            )
            #expect(response.status == .ok)
            #expect(response.metrics.redirectCount == 2)
            let echo = try json(Data(pieces.bytes))
            #expect(echo["url"] as? String == server.baseURL + "/get")
        }
    }

    @Test("answering false stops the transfer at once: cancelled, and the receiver hears nothing more")
    func receiverStops() async throws {
        try await withServer { server in
            let pieces = Pieces(acceptingAtMost: 1)
            await #expect {
                _ = try await transport.send(
                    try get(
                        server.baseURL + "/stream-bytes/5000000?chunk_size=10000",
                        options: .init(destination: .stream(pieces.stream))
                    )
                )
            } throws: { error in
                let error = try #require(error as? TransportError)
                return error.kind == .cancelled && error.message.contains("stream")
            }
            #expect(pieces.count == 1)
            // The transport goes on serving other requests.
            let next = try await transport.send(try get(server.baseURL + "/bytes/10"))
            #expect(next.body.map(Array.init) == Self.pattern(10))
        }
    }

    @Test("the body limit counts streamed bytes too")
    func limitApplies() async throws {
        try await withServer { server in
            let pieces = Pieces()
            await #expect {
                _ = try await transport.send(
                    try get(
                        server.baseURL + "/stream-bytes/200000?chunk_size=10000",
                        options: .init(maxResponseSize: 50_000, destination: .stream(pieces.stream))
                    )
                )
            } throws: { error in
                (error as? TransportError)?.kind == .bodyTooLarge
            }
            #expect(pieces.bytes.count <= 50_000)
            #expect(pieces.bytes == Self.pattern(pieces.bytes.count))
        }
    }

    @Test("StubTransport hands a scripted body to the stream, as CurlTransport does")
    func stubStreams() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/feed", StubResponse(status: .ok, body: Data("event: 1\n\n".utf8)))
        let pieces = Pieces()
        let response = try await stub.send(
            try get("https://api.example.com/feed", options: .init(destination: .stream(pieces.stream)))
        )
        #expect(response.body == nil)
        #expect(pieces.bytes == Array("event: 1\n\n".utf8))

        let refusing = Pieces(acceptingAtMost: 1)
        await #expect {
            _ = try await stub.send(
                try get("https://api.example.com/feed", options: .init(destination: .stream(refusing.stream)))
            )
        } throws: { error in
            (error as? TransportError)?.kind == .cancelled
        }
    }

    @Test("a stream that observes the response is told its status and headers before the first piece, and can stop it")
    func observesResponse() async throws {
        try await withServer { server in
            let seen = Delivered<String>()
            let stream = ResponseBodyStream(
                onResponse: { status, fields in
                    seen.add("\(status.code) \(fields[.contentType] ?? "")")
                    return true
                },
                { bytes in
                    seen.add("piece")
                    return true
                }
            )
            _ = try await CurlTransport().send(
                try get(server.baseURL + "/redirect-to?url=/bytes/1000", options: .init(destination: .stream(stream)))
            )
            let refusing = ResponseBodyStream(onResponse: { _, _ in false }, { _ in true })
            let request = try get(server.baseURL + "/bytes/1000", options: .init(destination: .stream(refusing)))
            var refused: TransportError?
            do throws(TransportError) {
                _ = try await CurlTransport().send(request)
            } catch {
                refused = error
            }
            // Told once, for the final response only (not the redirect), before any piece.
            #expect(seen.all.first == "200 application/octet-stream")
            #expect(seen.all.filter { !$0.hasPrefix("piece") }.count == 1)
            #expect(seen.all.count > 1)
            #expect(refused?.kind == .cancelled)
        }
    }
}
