import BrickRequest
import HTTPTypes
import Testing

@Suite("Redirect and resume decisions (no I/O)", .timeLimit(.minutes(2)))
struct RedirectAndResumeDecisionTests {
    typealias Origin = RedirectDecision.Origin
    static let https = Origin(scheme: "https", authority: "api.example.com")
    static let httpsExplicitPort = Origin(scheme: "https", authority: "API.example.com:443")
    static let otherHost = Origin(scheme: "https", authority: "cdn.example.com")
    static let otherPort = Origin(scheme: "https", authority: "api.example.com:8443")
    static let plain = Origin(scheme: "http", authority: "api.example.com")
    static let strict = CurlTransport.RedirectPolicy()
    static let lenient = CurlTransport.RedirectPolicy(maxRedirects: 3, allowsHTTPSToHTTP: true)

    struct RedirectRow: Sendable, CustomStringConvertible {
        var status: Int
        var method: HTTPRequest.Method
        var to: Origin
        var hops = 0
        var policy = RedirectAndResumeDecisionTests.strict
        var stripped = false
        var expected: RedirectDecision
        var line: Int
        var description: String { "line \(line): \(status) \(method) → \(to.scheme)://\(to.authority)" }
    }

    static let redirectRows: [RedirectRow] = [
        // Method rewriting per status.
        RedirectRow(status: 301, method: .post, to: https, expected: .follow(method: .get, dropsBody: true, stripsCredentials: false), line: #line),
        RedirectRow(status: 302, method: .post, to: https, expected: .follow(method: .get, dropsBody: true, stripsCredentials: false), line: #line),
        RedirectRow(status: 303, method: .post, to: https, expected: .follow(method: .get, dropsBody: true, stripsCredentials: false), line: #line),
        RedirectRow(status: 303, method: .put, to: https, expected: .follow(method: .get, dropsBody: true, stripsCredentials: false), line: #line),
        RedirectRow(status: 303, method: .head, to: https, expected: .follow(method: .head, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 307, method: .post, to: https, expected: .follow(method: .post, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 308, method: .post, to: https, expected: .follow(method: .post, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 301, method: .put, to: https, expected: .follow(method: .put, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 302, method: .get, to: https, expected: .follow(method: .get, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 302, method: .delete, to: https, expected: .follow(method: .delete, dropsBody: false, stripsCredentials: false), line: #line),
        // Origin changes strip credentials; the default port is the same origin.
        RedirectRow(status: 302, method: .get, to: httpsExplicitPort, expected: .follow(method: .get, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 302, method: .get, to: otherHost, expected: .follow(method: .get, dropsBody: false, stripsCredentials: true), line: #line),
        RedirectRow(status: 307, method: .post, to: otherPort, expected: .follow(method: .post, dropsBody: false, stripsCredentials: true), line: #line),
        RedirectRow(status: 302, method: .get, to: https, stripped: true, expected: .follow(method: .get, dropsBody: false, stripsCredentials: true), line: #line),
        // https → http.
        RedirectRow(status: 302, method: .get, to: plain, expected: .refuse(.redirectRefused, "redirect from https to http refused"), line: #line),
        RedirectRow(status: 302, method: .get, to: plain, policy: lenient, expected: .follow(method: .get, dropsBody: false, stripsCredentials: true), line: #line),
        // The hop limit.
        RedirectRow(status: 302, method: .get, to: https, hops: 9, expected: .follow(method: .get, dropsBody: false, stripsCredentials: false), line: #line),
        RedirectRow(status: 302, method: .get, to: https, hops: 10, expected: .refuse(.tooManyRedirects, "more than 10 redirects"), line: #line),
        RedirectRow(status: 302, method: .get, to: https, hops: 3, policy: lenient, expected: .refuse(.tooManyRedirects, "more than 3 redirects"), line: #line),
        RedirectRow(status: 302, method: .get, to: https, policy: .init(maxRedirects: 0), expected: .refuse(.tooManyRedirects, "more than 0 redirects"), line: #line),
    ]

    @Test("redirects: status × method × origin change × policy", arguments: redirectRows)
    func redirect(row: RedirectRow) {
        let decision = RedirectDecision.decide(
            status: row.status,
            method: row.method,
            from: Self.https,
            to: row.to,
            hopsSoFar: row.hops,
            policy: row.policy,
            credentialsStripped: row.stripped
        )
        #expect(decision == row.expected, "\(row)")
    }

    struct ResumeRow: Sendable, CustomStringConvertible {
        var offset: Int64
        var status: Int
        var range: String? = nil
        var encoding: String? = nil
        var tag: String? = nil
        var modified: String? = nil
        var expected: ResumeDecision
        var line: Int
        var description: String { "line \(line): offset \(offset) status \(status)" }
    }

    static let resumeRows: [ResumeRow] = [
        ResumeRow(offset: 100, status: 206, range: "bytes 100-999/1000", expected: .append, line: #line),
        ResumeRow(offset: 100, status: 206, range: "bytes 100-999/1000", encoding: "identity", expected: .append, line: #line),
        ResumeRow(offset: 100, status: 206, range: "bytes 100-999/1000", encoding: "gzip", expected: .refuse("the server continued the body content-encoded; it cannot be appended"), line: #line),
        ResumeRow(offset: 100, status: 206, range: "bytes 0-999/1000", tag: "\"a\"", expected: .startOver(truncate: true, validator: nil), line: #line),
        ResumeRow(offset: 100, status: 200, tag: "\"b\"", expected: .startOver(truncate: true, validator: "\"b\""), line: #line),
        ResumeRow(offset: 100, status: 416, expected: .startOver(truncate: true, validator: nil), line: #line),
        ResumeRow(offset: 100, status: 503, tag: "\"b\"", expected: .startOver(truncate: true, validator: nil), line: #line),
        ResumeRow(offset: 0, status: 200, tag: "\"a\"", modified: "Wed, 01 Jan 2025 00:00:00 GMT", expected: .startOver(truncate: false, validator: "\"a\""), line: #line),
        ResumeRow(offset: 0, status: 200, tag: "W/\"weak\"", modified: "Wed, 01 Jan 2025 00:00:00 GMT", expected: .startOver(truncate: false, validator: "Wed, 01 Jan 2025 00:00:00 GMT"), line: #line),
        ResumeRow(offset: 0, status: 200, tag: "W/\"weak\"", expected: .startOver(truncate: false, validator: nil), line: #line),
        ResumeRow(offset: 0, status: 200, encoding: "gzip", tag: "\"a\"", expected: .startOver(truncate: false, validator: nil), line: #line),
        ResumeRow(offset: 0, status: 206, range: "bytes 0-9/10", tag: "\"a\"", expected: .startOver(truncate: false, validator: nil), line: #line),
        ResumeRow(offset: 0, status: 404, tag: "\"a\"", expected: .startOver(truncate: false, validator: nil), line: #line),
    ]

    @Test("resuming downloads: offset × status × Content-Range × encoding × validators", arguments: resumeRows)
    func resume(row: ResumeRow) {
        let decision = ResumeDecision.decide(
            resumeOffset: row.offset,
            status: row.status,
            contentRange: row.range,
            contentEncoding: row.encoding,
            entityTag: row.tag,
            lastModified: row.modified
        )
        #expect(decision == row.expected, "\(row)")
    }
}
