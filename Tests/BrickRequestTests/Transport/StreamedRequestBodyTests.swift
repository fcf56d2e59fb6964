import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// An upload whose body is the endpoint's own.
private final class StreamedUpload: Component, POSTRequestType, NonAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    let requestBody: RequestBody?
    var headers: [String: String] { ["Content-Type": "application/octet-stream"] }
    init(_ url: String, session: Session, body: RequestBody) {
        self.urlString = url
        self.session = session
        self.requestBody = body
        super.init()
    }
}

/// `chunks` chunks of `size` bytes of `byte`.
private func source(length: Int64?, chunks: Int, size: Int, byte: UInt8 = 9, replayable: Bool = false, failing: Bool = false)
    -> RequestBodySource
{
    RequestBodySource(length: length, isReplayable: replayable, bufferSize: 64 << 10) {
        AsyncThrowingStream<ArraySlice<UInt8>, any Error> { continuation in
            for _ in 0..<chunks { continuation.yield(Array(repeating: byte, count: size)[...]) }
            if failing {
                continuation.finish(throwing: CancellationError())
            } else {
                continuation.finish()
            }
        }
    }
}

@Suite("Streamed request bodies (RequestBodySource) against the loopback server", .timeLimit(.minutes(3)))
struct StreamedRequestBodyTests {
    @Test("bytes, then a stream of known length: one body, sent with its Content-Length (not chunked)")
    func mixedSegmentsKnownLength() async throws {
        try await withServer { server in
            server.route("/sink") { request in .ok("\(request.body.count) \(request.body.filter { $0 == 9 }.count)") }
            let body = RequestBody(segments: [.data(Data("head".utf8)), .stream(source(length: 1 << 20, chunks: 16, size: 64 << 10))])
            let text = try await StreamedUpload(server.baseURL + "/sink", session: Session(), body: body).value
            #expect(String(decoding: text, as: UTF8.self) == "\(4 + (1 << 20)) \(1 << 20)")
            let received = try #require(server.requests(path: "/sink").first)
            #expect(received.header("Content-Length") == String(4 + (1 << 20)))
            #expect(received.header("Transfer-Encoding") == nil)
        }
    }

    @Test("a source that makes another length than declared, or fails, fails the request with requestBodyFailed")
    func failures() async throws {
        try await withServer { server in
            server.route("/sink") { request in .ok("\(request.body.count)") }
            let short = RequestBody(segments: [.stream(source(length: 100_000, chunks: 1, size: 1000))])
            let wrong = await StreamedUpload(server.baseURL + "/sink", session: Session(), body: short).response()
            #expect(wrong.error?.transportError?.kind == .requestBodyFailed)
            #expect(wrong.error?.message.contains("not the 100000 declared") == true)
            let broken = RequestBody(segments: [.stream(source(length: nil, chunks: 2, size: 1000, failing: true))])
            let failed = await StreamedUpload(server.baseURL + "/sink", session: Session(), body: broken).response()
            #expect(failed.error?.transportError?.kind == .requestBodyFailed)
            #expect(failed.error?.message.contains("source failed") == true)
        }
    }

    @Test("a single-pass stream is sent once: the same body again fails before anything is sent")
    func singlePassOnce() async throws {
        try await withServer { server in
            server.route("/sink") { request in .ok("\(request.body.count)") }
            let body = RequestBody(segments: [.stream(source(length: nil, chunks: 4, size: 1000))])
            let session = Session()
            let first = try await StreamedUpload(server.baseURL + "/sink", session: session, body: body).value
            #expect(String(decoding: first, as: UTF8.self) == "4000")
            let again = await StreamedUpload(server.baseURL + "/sink", session: session, body: body).response()
            #expect(again.error?.transportError?.kind == .requestBodyFailed)
            #expect(server.requests(path: "/sink").count == 1)
        }
    }
}
