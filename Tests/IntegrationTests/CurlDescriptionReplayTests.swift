import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

@Suite("cURLDescription replays with the curl command-line tool", .timeLimit(.minutes(5)))
struct CurlDescriptionReplayTests {
    @Test("the curl command sends the same request the transport sends")
    func replaysIdentically() async throws {
        let server = try await BrickTestServer.start()
        let directory = NSTemporaryDirectory() + "brick-replay-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let transport = CurlTransport()
        let file = directory + "/part.txt"
        try Data("file part, it's quoted".utf8).write(to: URL(fileURLWithPath: file))
        let request = try TransportRequest(
            method: .put,
            url: server.baseURL + "/anything/desc?q=a%20b&x=1",
            headers: [("Content-Type", "text/plain"), ("X-Quote", "it's \"here\""), ("Authorization", "Bearer t")],
            body: RequestBody(segments: [.data(Data("inline ".utf8)), .file(path: file)])
        )
        _ = try await transport.send(request)
        let command = transport.cURLDescription(for: request)
        #expect(command.contains("Authorization: Bearer t"))
        try await Subprocess.run(command + " -s -o /dev/null")
        let recorded = server.requests(path: "/anything/desc")
        try #require(recorded.count == 2)
        #expect(recorded[0].method == recorded[1].method)
        #expect(recorded[0].uri == recorded[1].uri)
        #expect(recorded[0].body == recorded[1].body)
        let headers = recorded.map { $0.headers.map { "\($0.name.lowercased()): \($0.value)" }.sorted() }
        #expect(headers[0] == headers[1])
        await server.shutdown()
    }
}
