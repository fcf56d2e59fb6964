import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// An event stream endpoint.
final class Ticks: Component, GETRequestType, ValidatedResponseType, NonAutoRetryType, EventStreamResponseType {
    let urlString: String
    let session: Session
    var headers: [String: String] { ["Accept": "text/event-stream"] }
    init(_ url: String, session: Session = Session()) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// An event stream that retries at once when it breaks off.
final class ResumingTicks: Component, GETRequestType, ValidatedResponseType, EventStreamResponseType {
    let urlString: String
    var autoRetryConfiguration: AutoRetryConfiguration {
        AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: 2)
    }
    init(_ url: String) {
        self.urlString = url
        super.init()
    }
}

struct Prompt: Encodable, Sendable {
    var prompt: String
    var stream = true
}

/// The documentation's example, aimed at the test server.
final class Completions: Component, POSTRequestType, JSONBodyRequestType, ValidatedResponseType,
    NonAutoRetryType, EventStreamResponseType
{
    let prompt: String
    let origin: String
    var urlString: String { origin + "/sse/3" }
    var headers: [String: String] { ["Accept": "text/event-stream"] }
    var jsonBody: Prompt? { Prompt(prompt: prompt) }
    init(prompt: String, origin: String) {
        self.prompt = prompt
        self.origin = origin
        super.init()
    }
}

@Suite("Server-sent events: the parser, and EventStreamResponseType", .timeLimit(.minutes(2)))
struct ServerSentEventsTests {
    static let stream = Array(
        (": a comment\r\n" + "event: greeting\r\ndata: hello\r\ndata:  world\r\nid: 7\r\n\r\n"
            + "data:no space\rretry: 2500\r\r" + "event: ignored, no data\n\n" + "data\nid: a\u{0}b\n\n"
            + "retry: soon\ndata: last\n\n" + "data: unfinished").utf8
    )
    static let expected = [
        ServerSentEvent(type: "greeting", data: "hello\n world", id: "7"),
        ServerSentEvent(data: "no space", id: "7", retry: .milliseconds(2500)),
        ServerSentEvent(data: "", id: "7", retry: .milliseconds(2500)),
        ServerSentEvent(data: "last", id: "7", retry: .milliseconds(2500)),
    ]

    @Test("fields, comments, CR/LF/CRLF line ends, ids and retry, as the standard reads them")
    func parsesWhole() {
        var parser = ServerSentEventParser()
        let events = parser.parse(Self.stream)
        #expect(events == Self.expected)
        #expect(parser.lastEventID == "7")
        #expect(parser.reconnectionTime == .milliseconds(2500))
    }

    @Test("the same events whatever the pieces: one byte at a time, or split at every CR", arguments: [1, 2, 3, 7])
    func parsesInPieces(size: Int) {
        var parser = ServerSentEventParser()
        var events: [ServerSentEvent] = []
        var offset = 0
        while offset < Self.stream.count {
            let end = min(offset + size, Self.stream.count)
            events += parser.parse(Self.stream[offset..<end])
            offset = end
        }
        #expect(events == Self.expected)
    }

    @Test("an id counts once its event's blank line is read; reconnected() drops an unfinished event")
    func reconnection() {
        var parser = ServerSentEventParser()
        let first = parser.parse(Array("id: 1\ndata: one\n\nid: 2\ndata: tw".utf8))
        let idBeforeReconnection = parser.lastEventID
        parser.reconnected()
        let second = parser.parse(Array("data: three\n\n".utf8))
        #expect(first == [ServerSentEvent(data: "one", id: "1")])
        #expect(idBeforeReconnection == "1")
        #expect(second == [ServerSentEvent(data: "three", id: "1")])
    }

    @Test("a byte order mark is skipped at the start of the stream only")
    func byteOrderMark() {
        var parser = ServerSentEventParser()
        let events = parser.parse(
            [0xEF, 0xBB, 0xBF] + Array("data: a\n\n".utf8) + [0xEF, 0xBB, 0xBF] + Array("data: b\n\n".utf8)
        )
        #expect(events.map(\.data) == ["a"])
    }

    @Test("events() yields each event from a real server, then ends")
    func events() async throws {
        try await withServer { server in
            var received: [ServerSentEvent] = []
            for try await event in Ticks(server.baseURL + "/sse/5").events() {
                received.append(event)
            }
            #expect(received.count == 5)
            #expect(received.map(\.type) == Array(repeating: "tick", count: 5))
            #expect(received.map(\.data) == (0..<5).map { "tick \($0)\nline 2" })
            #expect(received.map(\.id) == (0..<5).map { "\($0)" })
            #expect(server.requests(path: "/sse/5").first?.header("Accept") == "text/event-stream")
        }
    }

    @Test("the documented POST with a JSON body streams its events")
    func documentedExample() async throws {
        try await withServer { server in
            var data: [String] = []
            for try await event in Completions(prompt: "Hello", origin: server.baseURL).events() {
                data.append(event.data)
            }
            let sent = try #require(server.requests(path: "/sse/3").first)
            let body = try JSONSerialization.jsonObject(with: Data(sent.body)) as? [String: Any]
            #expect(data.count == 3)
            #expect(sent.method == "POST")
            #expect(body?["prompt"] as? String == "Hello")
            #expect(body?["stream"] as? Bool == true)
        }
    }

    @Test("events arrive while the response is still open; leaving the loop cancels the request")
    func streamingAndCancel() async throws {
        try await withServer { server in
            let ticks = Ticks(server.baseURL + "/sse/2?hold=1")
            var received: [String] = []
            for try await event in ticks.events() {
                received.append(event.data)
                if received.count == 2 { break }
            }
            // The server never ends this response: only cancellation closes its connection.
            await eventually { server.openConnectionCount == 0 }
            await eventually { ticks.state == .cancelled }
            #expect(received == ["tick 0\nline 2", "tick 1\nline 2"])
            #expect(server.openConnectionCount == 0)
            #expect(ticks.state == .cancelled)
        }
    }

    @Test("an error response is not parsed as events; its body comes with the error")
    func errorDocument() async throws {
        try await withServer { server in
            let document = Array("data: not an event\n\n{\"error\":\"slow down\"}".utf8)
            server.script(
                "/sse/4",
                [.respond(status: 429, headers: [.init("Content-Type", "text/plain")], body: document)]
            )
            var thrown: BrickError?
            var count = 0
            do {
                for try await _ in Ticks(server.baseURL + "/sse/4").events() { count += 1 }
            } catch {
                thrown = error as? BrickError
            }
            #expect(count == 0)
            #expect(thrown?.code == .unacceptableStatusCode)
            #expect(thrown?.status == .tooManyRequests)
            #expect(thrown?.responseBody == Data(document))
        }
    }

    @Test(
        "events() on a request that already ran, or was cancelled, ends at once with cancelled",
        .timeLimit(.minutes(3))
    )
    func alreadyRan() async throws {
        try await withServer { server in
            let ticks = Ticks(server.baseURL + "/sse/1")
            for try await _ in ticks.events() {}
            let cancelled = Ticks(server.baseURL + "/sse/1")
            cancelled.cancel()
            var errors: [BrickError?] = []
            for request in [ticks, cancelled] {
                do {
                    for try await _ in request.events() {}
                    errors.append(nil)
                } catch {
                    errors.append(error as? BrickError)
                }
            }
            #expect(errors.map { $0?.code } == [.cancelled, .cancelled])
            #expect(server.requests(path: "/sse/1").count == 1)
        }
    }

    @Test("a stream that breaks off is reconnected with Last-Event-ID and continues after the last event")
    func reconnects() async throws {
        try await withServer { server in
            let ticks = ResumingTicks(server.baseURL + "/sse/5?cut_after=2")
            var ids: [String?] = []
            var data: [String] = []
            for try await event in ticks.events() {
                ids.append(event.id)
                data.append(event.data)
            }
            let requests = server.requests(path: "/sse/5")
            // Each event once; the half event of the broken response is dropped.
            #expect(ids == ["0", "1", "2", "3", "4"])
            #expect(data.allSatisfy { $0.hasSuffix("line 2") })
            #expect(requests.map { $0.header("Last-Event-ID") } == [nil, "1"])
            #expect(ticks.retryCount == 1)
        }
    }

    @Test("a failed request ends the sequence with its BrickError")
    func failure() async throws {
        try await withServer { server in
            var thrown: (any Error)?
            var count = 0
            do {
                for try await _ in Ticks(server.baseURL + "/status/503").events() { count += 1 }
            } catch {
                thrown = error
            }
            #expect(count == 0)
            #expect((thrown as? BrickError)?.code == .unacceptableStatusCode)
            #expect((thrown as? BrickError)?.status == .serviceUnavailable)
        }
    }
}
