import BrickHAR
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

/// A GET whose body is read as `Data`, on the session the test names; no retry, no validation.
final class ArchivedGet: Component, GETRequestType, NonAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    let headers: [String: String]
    init(_ url: String, session: Session, headers: [String: String] = [:]) {
        self.urlString = url
        self.session = session
        self.headers = headers
        super.init()
    }
}

/// A POST of raw bytes.
final class ArchivedPost: Component, POSTRequestType, NonAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    let requestBody: RequestBody?
    init(_ url: String, session: Session, body: Data) {
        self.urlString = url
        self.session = session
        self.requestBody = RequestBody(segments: [.data(body)])
        super.init()
    }
}

/// What a test compares of a response: status, header fields (but those that vary by the
/// moment), body bytes.
struct Answer: Equatable, CustomStringConvertible {
    var status: Int
    var headers: [String]
    var body: Data
    var error: String?

    init(_ response: Response<Data, BrickError>) {
        error = response.error.map { "\($0)" }
        status = response.status?.code ?? 0
        headers = response.headers.filter { $0.name != .date }.map { "\($0.name.canonicalName): \($0.value)" }
        body = response.data ?? Data()
    }

    var description: String { "\(status) \(headers) \(body.count) bytes \(error ?? "")" }
}

let replaysDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Replays").path

/// Runs `Replays/check-har.py` (jsonschema and haralyzer) on `files`, on a thread of its own (a
/// Python start holds no cooperative thread); its lines, parsed.
func checkedByPython(_ files: [String]) async throws -> [[String: Any]] {
    let quoted = files.map { "'\($0)'" }.joined(separator: " ")
    let output = try await Subprocess.run("python3 '\(replaysDirectory)/check-har.py' \(quoted)")
    return try output.split(separator: "\n").map {
        try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:]
    }
}

@Suite("HAR recording and replay", .timeLimit(.minutes(2)))
struct ReplayTests {
    static let secrets = ["PLANTED-TOKEN-7d1f", "PLANTED-COOKIE-9a2c", "PLANTED-KEY-41be", "PLANTED-QUERY-c03e", "PLANTED-SETCOOKIE-5e77"]

    /// A scratch file for a recording.
    func scratch() -> String {
        NSTemporaryDirectory() + "brick-replay-" + UUID().uuidString + "/recording.har"
    }

    func prepare(_ server: BrickTestServer, version: String = "v1") {
        server.route("/users") { _ in
            .respond(
                status: 200,
                headers: [
                    .init("Content-Type", "application/json"),
                    .init("X-Version", version),
                    .init("Set-Cookie", "session=\(Self.secrets[4]); HttpOnly"),
                ],
                body: Array(#"{"name":"Ada","version":"\#(version)"}"#.utf8)
            )
        }
        server.route("/avatar") { _ in
            .respond(status: 200, headers: [.init("Content-Type", "image/png")], body: (0...255).map { UInt8($0) })
        }
        server.route("/echo") { request in
            .respond(status: 201, headers: [.init("Content-Type", "application/octet-stream")], body: request.body)
        }
    }

    /// The requests the record/replay tests make; `query` in either order.
    func exchangeAll(_ base: String, session: Session, reversedQuery: Bool = false) async -> [Answer] {
        let query = reversedQuery ? "a=1&api_key=\(Self.secrets[3])&b=2" : "b=2&api_key=\(Self.secrets[3])&a=1"
        let headers = [
            "Authorization": "Bearer \(Self.secrets[0])", "Cookie": "id=\(Self.secrets[1])", "X-Api-Key": Self.secrets[2],
        ]
        var answers: [Answer] = []
        answers.append(Answer(await ArchivedGet(base + "/users?" + query, session: session, headers: headers).response()))
        answers.append(Answer(await ArchivedGet(base + "/avatar", session: session).response()))
        answers.append(Answer(await ArchivedGet(base + "/nothing-here", session: session).response()))
        answers.append(Answer(await ArchivedPost(base + "/echo", session: session, body: Data([0, 255, 1, 254])).response()))
        return answers
    }

    @Test("recorded with the loopback server, replayed with it stopped: identical statuses, header fields and body bytes; no secret in the file; valid HAR 1.2 to jsonschema and haralyzer")
    func recordThenReplay() async throws {
        let path = scratch()
        let redaction = HARRedaction(headers: ["X-Api-Key"], queryParameters: ["api_key"])
        let session = Session(configuration: .init())
        let server = try await BrickTestServer.start()
        prepare(server)
        let base = server.baseURL
        let recorded = try await withReplay(path: path, mode: .record, redaction: redaction) {
            await exchangeAll(base, session: session)
        }
        #expect(server.requestCount == 4)
        await server.shutdown()
        try #require(recorded.map(\.status) == [200, 200, 404, 201], "\(recorded)")

        let replayed = try await withReplay(path: path, mode: .replay) {
            await exchangeAll(base, session: session, reversedQuery: true)
        }
        // Set-Cookie was redacted when recording; everything else is as the server said.
        func withoutSetCookie(_ answers: [Answer]) -> [Answer] {
            answers.map { answer in
                var answer = answer
                answer.headers.removeAll { $0.hasPrefix("set-cookie:") }
                return answer
            }
        }
        #expect(withoutSetCookie(replayed) == withoutSetCookie(recorded))
        #expect(replayed[0].headers.contains("set-cookie: REDACTED"))
        #expect(replayed[1].body == Data((0...255).map { UInt8($0) }))
        #expect(replayed[3].body == Data([0, 255, 1, 254]))

        let text = try String(contentsOfFile: path, encoding: .utf8)
        for secret in Self.secrets { #expect(!text.contains(secret), "\(secret) reached the fixture") }
        let archive = try HARArchive(contentsOf: path)
        #expect(archive.exchanges.map(\.method) == [.get, .get, .get, .post])
        #expect(archive.exchanges[3].requestBody == Data([0, 255, 1, 254]))
        #expect(archive.exchanges[0].requestHeaders[.authorization] == "Bearer REDACTED" || archive.exchanges[0].requestHeaders[.authorization] == "REDACTED")

        let lines = try await checkedByPython([path])
        #expect(lines.map { $0["status"] as? Int } == [200, 200, 404, 201])
        #expect(lines[1]["encoding"] as? String == "base64")
        #expect(lines[0]["text"] as? String == #"{"name":"Ada","version":"v1"}"#)
    }

    @Test("re-recording after the server's answer changed updates the fixture; .once replays an existing one without a request")
    func reRecord() async throws {
        let path = scratch()
        let session = Session(configuration: .init())
        try await withServer(prepare: { prepare($0, version: "v1") }) { server in
            _ = try await withReplay(path: path, mode: .once) { await ArchivedGet(server.baseURL + "/users", session: session).response() }
            #expect(server.requestCount == 1)
            prepare(server, version: "v2")
            server.resetRecords()
            // The file exists: .once replays v1, and the server sees nothing.
            let once = try await withReplay(path: path, mode: .once) {
                await ArchivedGet(server.baseURL + "/users", session: session).response()
            }
            #expect(once.headers[HTTPField.Name("X-Version")!] == "v1")
            #expect(server.requestCount == 0)
            _ = try await withReplay(path: path, mode: .record) { await ArchivedGet(server.baseURL + "/users", session: session).response() }
            #expect(server.requestCount == 1)
        }
        let archive = try HARArchive(contentsOf: path)
        #expect(archive.exchanges.count == 1)
        #expect(archive.exchanges.first?.response?.headerFields[HTTPField.Name("X-Version")!] == "v2")
        #expect(archive.exchanges.first.map { String(decoding: $0.responseBody, as: UTF8.self) } == #"{"name":"Ada","version":"v2"}"#)
    }

    @Test("a re-recording of an unchanged server leaves the fixture byte-identical (dates, timings and fresh keys do not count); a changed answer rewrites it; a recording on one port replays on the next with anyLoopbackPort")
    func stableReRecord() async throws {
        let path = scratch()
        let session = Session(configuration: .init())
        func record(_ server: BrickTestServer) async throws {
            _ = try await withReplay(path: path, mode: .record) {
                (await ArchivedGet(server.baseURL + "/users", session: session, headers: ["traceparent": "00-\(UUID().uuidString.replacingOccurrences(of: "-", with: ""))-01"]).response(),
                 await ArchivedPost(server.baseURL + "/users", session: session, body: Data("same".utf8)).response())
            }
        }
        try await withServer(prepare: { prepare($0, version: "v1") }) { server in
            try await record(server)
            let first = try Data(contentsOf: URL(fileURLWithPath: path))
            try await record(server)
            #expect(server.requests(path: "/users").count == 4, "both runs went to the server")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == first, "unchanged exchanges: the file is left as it was")
            prepare(server, version: "v2")
            try await record(server)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) != first, "a changed answer is written")
        }
        // The same recording, replayed as for a server on another port (nothing is sent: the
        // table above shows that without anyLoopbackPort the port is part of the origin).
        let loose = try await withReplay(path: path, mode: .replay, matching: ReplayMatching(anyLoopbackPort: true)) {
            await ArchivedGet("http://127.0.0.1:1/users", session: session).response()
        }
        #expect(loose.status == .ok)
        #expect(loose.headers[HTTPField.Name("X-Version")!] == "v2")
    }

    @Test(".newEpisodes replays what is recorded and records what is not")
    func newEpisodes() async throws {
        let path = scratch()
        let session = Session(configuration: .init())
        try await withServer(prepare: { prepare($0) }) { server in
            _ = try await withReplay(path: path, mode: .record) { await ArchivedGet(server.baseURL + "/users", session: session).response() }
            server.resetRecords()
            let answers = try await withReplay(path: path, mode: .newEpisodes) {
                (await ArchivedGet(server.baseURL + "/users", session: session).response(),
                 await ArchivedGet(server.baseURL + "/avatar", session: session).response())
            }
            #expect(answers.0.status == .ok && answers.1.status == .ok)
            #expect(server.requests.map(\.path) == ["/avatar"])
        }
        #expect(try HARArchive(contentsOf: path).exchanges.map { URL(string: $0.url)?.path } == ["/users", "/avatar"])
    }

    @Test("a request no recorded exchange matches fails, naming the closest recorded request and how it differs")
    func unmatched() async throws {
        let path = scratch()
        let session = Session(configuration: .init())
        let base = try await withServer(prepare: { prepare($0) }) { server in
            _ = try await withReplay(path: path, mode: .record) {
                _ = await ArchivedGet(server.baseURL + "/users?id=1", session: session).response()
                _ = await ArchivedGet(server.baseURL + "/avatar", session: session).response()
            }
            return server.baseURL
        }
        var failure: BrickError?
        try await withKnownIssue {
            try await withReplay(path: path, mode: .replay) {
                failure = await ArchivedGet(base + "/users?id=2", session: session).response().error
            }
        } matching: { issue in
            issue.comments.contains { $0.rawValue.contains("the closest is #0 GET \(base)/users?id=1") }
        }
        let message = try #require(failure).description
        #expect(message.contains("no recorded exchange in recording.har matches GET \(base)/users?id=2"), "\(message)")
        #expect(message.contains(#"query "id=2", recorded "id=1""#), "\(message)")
    }

    @Test("BRICK_RECORD=1 turns every mode into .record; anything else leaves the mode as written")
    func recordFromTheEnvironment() {
        for mode in ReplayMode.allCases {
            #expect(mode.effective(in: ["BRICK_RECORD": "1"]) == .record)
            #expect(mode.effective(in: ["BRICK_RECORD": "0"]) == mode)
            #expect(mode.effective(in: [:]) == mode)
        }
    }

    @Test("a replay without its file fails at once, saying how to record it")
    func missingFile() async throws {
        let error = await #expect(throws: HARError.self) {
            try await withReplay(path: scratch(), mode: .replay) {}
        }
        #expect(error?.message.contains("BRICK_RECORD=1") == true)
    }

    @Test("a browser's DevTools export replays: HTTP/2 pseudo-header fields skipped, a base64 image decoded, query order free")
    func devToolsExport() async throws {
        let session = Session(configuration: .init())
        let path = replaysDirectory + "/devtools-export.har"
        let (user, avatar) = try await withReplay(path: path, mode: .replay) {
            (await ArchivedGet("https://api.example.com/users/100?lang=en&fields=name,email", session: session).response(),
             await ArchivedGet("https://cdn.example.com/avatars/100.png", session: session).response())
        }
        #expect(user.status == .ok)
        #expect(user.data.map { String(decoding: $0, as: UTF8.self) } == #"{"id":"100","name":"Ada","email":"ada@example.com"}"#)
        #expect(user.headers[.cacheControl] == "private, max-age=60")
        #expect(user.metrics?.httpVersion == .http2)
        #expect(avatar.data?.count == 16)
        #expect(avatar.data?.prefix(4) == Data([0x89, 0x50, 0x4E, 0x47]))
        _ = try await checkedByPython([path, replaysDirectory + "/fetchUser.har"])
    }

    /// Two sessions, neither named by the trait: both answer from `Replays/fetchUser.har`.
    static let api = Session(configuration: .init(defaultHeaders: ["Accept": "application/json"]))
    static let cdn = Session(configuration: .init())

    @Test("the .replay trait: every session in the test answers from Replays/NAME.har", .replay("fetchUser"))
    func trait() async throws {
        let user = try await ArchivedGet("https://api.example.com/users/100", session: Self.api).value
        #expect(String(decoding: user, as: UTF8.self) == #"{"id":"100","name":"Ada"}"#)
        let failed = await ArchivedGet("https://cdn.example.com/avatars/100.png", session: Self.cdn).response()
        #expect(failed.error?.transportError?.kind == .connectionReset)
    }
}

@Suite("Replay matching (pure decisions)")
struct ReplayMatchingTests {
    func exchange(_ method: HTTPRequest.Method, _ url: String, headers: HTTPFields = [:], body: Data? = nil) -> HARExchange {
        HARExchange(method: method, url: url, requestHeaders: headers, requestBody: body, response: HTTPResponse(status: .ok))
    }

    @Test("which recorded exchange answers: a table")
    func table() {
        let recorded = [
            exchange(.get, "http://h/users?a=1&b=2"),
            exchange(.get, "http://h/users?a=1&b=2"),
            exchange(.post, "http://h/users", headers: [.contentType: "application/json"], body: Data("x".utf8)),
            exchange(.get, "http://h/search?q=REDACTED&page=1"),
            exchange(.get, "http://127.0.0.1:41000/local"),
            exchange(.get, "http://[::1]:41000/v6"),
            exchange(.get, "http://api.example:8443/remote"),
        ]
        struct Row {
            var method: String
            var url: String
            var matching = ReplayMatching.methodAndURL
            var headers: HTTPFields = [:]
            var body: Data? = nil
            var expected: [ReplayIndex.Decision]
        }
        let rows: [Row] = [
            // Query order is free; equal requests take the recorded ones in turn, then the last repeats.
            Row(method: "GET", url: "http://h/users?b=2&a=1", expected: [.answer(0), .answer(1), .answer(1)]),
            // Scheme and host without regard to case.
            Row(method: "GET", url: "HTTP://H/users?a=1&b=2", expected: [.answer(0)]),
            // A recorded REDACTED value matches any value.
            Row(method: "GET", url: "http://h/search?page=1&q=secret", expected: [.answer(3)]),
            Row(method: "GET", url: "http://h/search?page=2&q=secret", expected: [.unmatched(closest: 3, differences: [#"query "page=2&q=secret", recorded "page=1&q=REDACTED""#])]),
            Row(method: "DELETE", url: "http://h/users", expected: [.unmatched(closest: 2, differences: ["method DELETE, recorded POST"])]),
            Row(method: "GET", url: "http://h/users", expected: [.unmatched(closest: 0, differences: [#"query "", recorded "a=1&b=2""#])]),
            // Bodies and header fields only when asked.
            Row(method: "POST", url: "http://h/users", body: Data("y".utf8), expected: [.answer(2)]),
            Row(method: "POST", url: "http://h/users", matching: ReplayMatching(body: true), body: Data("y".utf8), expected: [.unmatched(closest: 2, differences: ["body (1 bytes, recorded 1)"])]),
            Row(method: "POST", url: "http://h/users", matching: ReplayMatching(headers: [.contentType]), headers: [.contentType: "text/plain"], expected: [.unmatched(closest: 2, differences: ["header Content-Type"])]),
            Row(method: "POST", url: "http://h/users", matching: ReplayMatching(headers: [.contentType], body: true), headers: [.contentType: "application/json"], body: Data("x".utf8), expected: [.answer(2)]),
            // A loopback origin on another port: only with anyLoopbackPort, and never another host's port.
            Row(method: "GET", url: "http://127.0.0.1:52000/local", expected: [.unmatched(closest: 4, differences: ["origin http://127.0.0.1:52000, recorded http://127.0.0.1:41000"])]),
            Row(method: "GET", url: "http://127.0.0.1:52000/local", matching: ReplayMatching(anyLoopbackPort: true), expected: [.answer(4)]),
            Row(method: "GET", url: "http://[::1]:52000/v6", matching: ReplayMatching(anyLoopbackPort: true), expected: [.answer(5)]),
            Row(method: "GET", url: "http://127.0.0.2:41000/local", matching: ReplayMatching(anyLoopbackPort: true), expected: [.unmatched(closest: 4, differences: ["origin http://127.0.0.2:41000, recorded http://127.0.0.1:41000"])]),
            Row(method: "GET", url: "https://127.0.0.1:41000/local", matching: ReplayMatching(anyLoopbackPort: true), expected: [.unmatched(closest: 4, differences: ["origin https://127.0.0.1:41000, recorded http://127.0.0.1:41000"])]),
            Row(method: "GET", url: "http://api.example:9443/remote", matching: ReplayMatching(anyLoopbackPort: true), expected: [.unmatched(closest: 6, differences: ["origin http://api.example:9443, recorded http://api.example:8443"])]),
        ]
        for row in rows {
            var index = ReplayIndex(recorded, matching: row.matching)
            let probe = ReplayProbe(method: row.method, url: row.url, headers: row.headers, body: row.body)
            let decisions = row.expected.indices.map { _ in index.decide(probe) }
            #expect(decisions == row.expected, "\(row.method) \(row.url)")
        }
        var empty = ReplayIndex([], matching: .methodAndURL)
        #expect(empty.decide(ReplayProbe(method: "GET", url: "http://h/", headers: [:], body: nil)) == .unmatched(closest: nil, differences: []))
    }

    @Test("redaction: credential header fields, named ones, query parameters and the URL's user are replaced")
    func redaction() {
        let redaction = HARRedaction(headers: ["X-Api-Key"], queryParameters: ["token"])
        let fields: HTTPFields = [.authorization: "Bearer s", .cookie: "a=s", HTTPField.Name("X-Api-Key")!: "s", .accept: "*/*"]
        let redacted = redaction.redact(fields)
        #expect(redacted.map(\.value) == ["REDACTED", "REDACTED", "REDACTED", "*/*"])
        #expect(redaction.redact(url: "https://user:pw@h:8443/p?token=s&x=1#f") == "https://h:8443/p?token=REDACTED&x=1#f")
        #expect(redaction.redact(url: "https://h/p?tokens=1") == "https://h/p?tokens=1")
    }
}
