import BrickHAR
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

/// A POST of a body with the header fields given.
final class ArchivedForm: Component, POSTRequestType, NonAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    let headers: [String: String]
    let requestBody: RequestBody?
    init(_ url: String, session: Session, headers: [String: String], body: String) {
        self.urlString = url
        self.session = session
        self.headers = headers
        self.requestBody = RequestBody(segments: [.data(Data(body.utf8))])
        super.init()
    }
}

@Suite("Redaction of what a recording keeps", .timeLimit(.minutes(2)))
struct RedactionTests {
    /// Six secrets, each planted where the last probes found one escaping.
    static let bearer = "PLANTED-BEARER-1f0e93"
    static let apiKey = "PLANTED-APIKEY-77c2d1"
    static let queryToken = "PLANTED-QTOKEN-a4b5c6"
    static let password = "PLANTED-PASSWORD-e9d8"
    static let accessToken = "PLANTED-ACCESS-3141592"
    static let refreshToken = "PLANTED-REFRESH-2718281"

    @Test("an echoing server, an OAuth token answer, a form password, ?%74oken= and token= in a Location, the session's own X-Api-Key: none of six secrets reaches the file; replay still matches")
    func echoingServer() async throws {
        let server = try await BrickTestServer.start()
        // httpbin's /anything: the request echoed back, headers, URL and body.
        server.route("/anything") { request in
            let echoed: [String: Any] = [
                "url": request.uri,
                "headers": Dictionary(request.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a }),
                "data": String(decoding: request.body, as: UTF8.self),
            ]
            let body = try! JSONSerialization.data(withJSONObject: echoed, options: [.sortedKeys])
            return .respond(status: 200, headers: [.init("Content-Type", "application/json")], body: Array(body))
        }
        server.route("/oauth/token") { _ in
            .respond(
                status: 200,
                headers: [.init("Content-Type", "application/json;charset=UTF-8")],
                body: Array(#"{"access_token":"\#(Self.accessToken)","token_type":"Bearer","expires_in":3600,"refresh_token":"\#(Self.refreshToken)"}"#.utf8)
            )
        }
        server.route("/moved") { _ in
            .respond(status: 200, headers: [.init("Content-Location", "/next?token=\(Self.queryToken)&page=2")], body: [])
        }
        let path = NSTemporaryDirectory() + "brick-redaction-" + UUID().uuidString + "/echo.har"
        // The session names X-Api-Key; the redaction given to withReplay does not.
        let session = Session(configuration: .init(sensitiveHeaders: ["X-Api-Key"]))
        let base = server.baseURL
        func run() async -> [Int] {
            var statuses: [Int] = []
            let echo = await ArchivedForm(
                base + "/anything?%74oken=\(Self.queryToken)&x=1", session: session,
                headers: ["Authorization": "Bearer \(Self.bearer)", "X-Api-Key": Self.apiKey, "Content-Type": "application/json"],
                body: #"{"user":"ada","password":"\#(Self.password)"}"#
            ).response()
            statuses.append(echo.status?.code ?? 0)
            let token = await ArchivedForm(
                base + "/oauth/token", session: session,
                headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: "grant_type=refresh_token&refresh_token=\(Self.refreshToken)&client_id=app"
            ).response()
            statuses.append(token.status?.code ?? 0)
            statuses.append(await ArchivedGet(base + "/moved", session: session).response().status?.code ?? 0)
            return statuses
        }
        let recorded = try await withReplay(path: path, mode: .record) { await run() }
        #expect(recorded == [200, 200, 200])
        await server.shutdown()

        let text = try String(contentsOfFile: path, encoding: .utf8)
        for secret in [Self.bearer, Self.apiKey, Self.queryToken, Self.password, Self.accessToken, Self.refreshToken] {
            #expect(!text.contains(secret), "\(secret) reached the fixture")
        }
        // What is not secret is kept as it was.
        let archive = try HARArchive(contentsOf: path)
        let oauth = String(decoding: archive.exchanges[1].responseBody, as: UTF8.self)
        #expect(oauth == #"{"access_token":"REDACTED","token_type":"Bearer","expires_in":3600,"refresh_token":"REDACTED"}"#)
        #expect(archive.exchanges[2].response?.headerFields[HTTPField.Name("Content-Location")!] == "/next?token=REDACTED&page=2")
        #expect(archive.exchanges[0].url.hasSuffix("/anything?%74oken=REDACTED&x=1"))

        // Replayed with the server gone, with the real secrets sent again: every request matches.
        let replayed = try await withReplay(path: path, mode: .replay) { await run() }
        #expect(replayed == [200, 200, 200])
    }

    @Test("body fields: JSON at any depth (strings and numbers, escaped, cut short), forms, names given; a value redacted once is replaced everywhere in the exchange, percent-encoded or not")
    func table() {
        let redaction = HARRedaction(bodyFields: ["pin"])
        let rows: [(String, String?, String)] = [
            (#"{"password":"hunter22"}"#, "application/json", #"{"password":"REDACTED"}"#),
            (#"{"a":{"b":[{"Client_Secret" : "s3cr3t-xyz"}]},"n":1}"#, nil, #"{"a":{"b":[{"Client_Secret" : "REDACTED"}]},"n":1}"#),
            (#"{"pin":1234,"ok":true}"#, "application/json", #"{"pin":"REDACTED","ok":true}"#),
            (#"{"token":"a\"b\/c-long"}"#, "application/json", #"{"token":"REDACTED"}"#),
            (#"{"data":{"id_token":"eyJhbGciOi"#, "application/json", #"{"data":{"id_token":"eyJhbGciOi"#),
            (#"{"name":"password","value":"x"}"#, "application/json", #"{"name":"password","value":"x"}"#),
            ("user=ada&Password=p%40ss+word&x=1", "application/x-www-form-urlencoded", "user=ada&Password=REDACTED&x=1"),
            ("plain text password=abc", "text/plain", "plain text password=abc"),
        ]
        for (body, type, expected) in rows {
            var headers = HTTPFields()
            if let type { headers[.contentType] = type }
            let exchange = HARExchange(method: .post, url: "http://h/", requestHeaders: headers, requestBody: Data(body.utf8), response: nil)
            let redacted = redaction.redact(exchange).requestBody ?? Data()
            #expect(String(decoding: redacted, as: UTF8.self) == expected, "\(body)")
        }
        // Found once (the Authorization field), replaced everywhere else in the exchange.
        let exchange = HARExchange(
            method: .post,
            url: "https://h/cb?echo=abc%2Fdef%2Bghi-secret",
            requestHeaders: [.authorization: "Bearer abc/def+ghi-secret", .contentType: "text/plain"],
            requestBody: Data("sent abc/def+ghi-secret".utf8),
            response: HTTPResponse(status: .ok, headerFields: [HTTPField.Name("X-Echo")!: "abc/def+ghi-secret"]),
            responseBody: Data(#"{"auth":"Bearer abc\/def+ghi-secret"}"#.utf8)
        )
        let redacted = HARRedaction().redact(exchange)
        #expect(redacted.url == "https://h/cb?echo=REDACTED")
        #expect(redacted.requestHeaders[.authorization] == "REDACTED")
        #expect(redacted.requestBody == Data("sent REDACTED".utf8))
        #expect(redacted.response?.headerFields[HTTPField.Name("X-Echo")!] == "REDACTED")
        #expect(String(decoding: redacted.responseBody, as: UTF8.self) == #"{"auth":"REDACTED"}"#)
    }

    @Test("a recorded https://h:443/p answers https://h/p, and http://h/p answers http://h:80/p (a scheme's default port is no difference)")
    func defaultPorts() {
        let recorded = [
            HARExchange(method: .get, url: "https://api.example.com:443/p?a=1", response: HTTPResponse(status: .ok)),
            HARExchange(method: .get, url: "http://api.example.com/q", response: HTTPResponse(status: .ok)),
        ]
        var index = ReplayIndex(recorded, matching: .methodAndURL)
        #expect(index.decide(ReplayProbe(method: "GET", url: "https://api.example.com/p?a=1", headers: [:], body: nil)) == .answer(0))
        #expect(index.decide(ReplayProbe(method: "GET", url: "http://API.example.com:80/q", headers: [:], body: nil)) == .answer(1))
        if case .answer = index.decide(ReplayProbe(method: "GET", url: "https://api.example.com:8443/p?a=1", headers: [:], body: nil)) {
            Issue.record("another port matched")
        }
    }

    @Test("a HAR file with absurd times (1e16, 1e300, 1e400) is read, times clamped to a year, never trapping")
    func absurdTimes() throws {
        let directory = NSTemporaryDirectory() + "brick-har-times-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for value in ["1e16", "1e300", "1e400", "-1e300", "9223372036854775807"] {
            let har = """
                {"log":{"version":"1.2","creator":{"name":"x","version":"1"},"entries":[{"startedDateTime":"2026-11-29T10:00:00.000Z",\
                "time":\(value),"request":{"method":"GET","url":"http://h/p","httpVersion":"HTTP/1.1","cookies":[],"headers":[],\
                "queryString":[],"headersSize":-1,"bodySize":0},"response":{"status":200,"statusText":"OK","httpVersion":"HTTP/1.1",\
                "cookies":[],"headers":[],"content":{"size":0,"mimeType":"text/plain"},"redirectURL":"","headersSize":-1,"bodySize":0},\
                "cache":{},"timings":{"send":\(value),"wait":\(value),"receive":0,"dns":\(value),"connect":\(value)}}]}}
                """
            let path = directory + "/times.har"
            try har.write(toFile: path, atomically: true, encoding: .utf8)
            do {
                let archive = try HARArchive(contentsOf: path)
                let total = try #require(archive.exchanges.first).metrics.total
                #expect(total >= .zero && total <= .seconds(366 * 86_400), "\(value): \(total)")
            } catch let error as HARError {
                // Refused with a clear error is as good as clamped (1e400 is not a JSON number Swift reads).
                #expect(!error.message.isEmpty, "\(value)")
            }
        }
    }
}
