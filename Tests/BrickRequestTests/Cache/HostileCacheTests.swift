import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import HTTPTypes
import Testing

/// The response cache against a server that sends what it should not: ages too large for an
/// integer, a `304` for another version, responses made for another user's cookie, cookies.
@Suite("Response cache against hostile servers", .timeLimit(.minutes(3)))
struct HostileCacheTests {
    private static func fields(_ pairs: [(String, String)]) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in pairs { fields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return fields
    }

    @Test(
        "Age: too large for an integer counts as 2^31; a list or a repeated field counts by its first value",
        arguments: [
            ([("Age", "99999999999999999999")], Int64(1) << 31),
            ([("Age", "7200, 1")], 7200),
            ([("Age", "7200"), ("Age", "1")], 7200),
            ([("Age", "abc")], 0),
        ] as [([(String, String)], Int64)]
    )
    func ageValues(fields pairs: [(String, String)], seconds: Int64) {
        let now = Date()
        let facts = StoredResponseFacts(status: 200, fields: Self.fields(pairs + [("Cache-Control", "max-age=3600")]), requestTime: now, responseTime: now)
        #expect(facts.initialAge == .seconds(seconds))
    }

    @Test("a response whose Age is past its lifetime (even one too large for an integer) is not served as fresh")
    func hugeAgeIsStale() async throws {
        try await withServer { server in
            let session = Session()
            for (index, age) in ["99999999999999999999", "7200, 1"].enumerated() {
                let path = "/age\(index)"
                server.script(
                    path,
                    [
                        .respond(status: 200, headers: [.init("Cache-Control", "max-age=3600"), .init("Age", age)], body: Array("old".utf8)),
                        .respond(status: 200, headers: [.init("Cache-Control", "max-age=3600")], body: Array("new".utf8)),
                    ]
                )
                _ = await CachedGet(server.baseURL + path, session: session).response()
                let second = await CachedGet(server.baseURL + path, session: session).response()
                #expect(second.source == .network, "Age: \(age)")
                #expect(second.data == Data("new".utf8))
                #expect(server.requests(path: path).count == 2)
            }
        }
    }

    @Test("a 304 carrying another strong ETag does not confirm the stored body: it is fetched again and replaced")
    func notModifiedForAnotherVersion() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/versioned"
            server.script(
                "/versioned",
                [
                    .respond(status: 200, headers: [.init("Cache-Control", "max-age=0"), .init("ETag", "\"v1\"")], body: Array("old".utf8)),
                    .respond(status: 304, headers: [.init("ETag", "\"v2\"")]),
                    .respond(status: 200, headers: [.init("Cache-Control", "max-age=600"), .init("ETag", "\"v2\"")], body: Array("new".utf8)),
                ]
            )
            _ = await CachedGet(url, session: session).response()
            let second = await CachedGet(url, session: session).response()
            #expect(second.data == Data("new".utf8))
            #expect(second.source == .network)
            let requests = server.requests(path: "/versioned")
            #expect(requests.count == 3)
            // The third request was unconditional.
            #expect(requests.last.map { $0.headers.contains { $0.name.lowercased() == "if-none-match" } } == false)
            // What is stored now is the new version.
            let third = await CachedGet(url, session: session).response()
            #expect(third.source == .cache)
            #expect(third.data == Data("new".utf8))
        }
    }

    @Test("a response to a request carrying Cookie is not stored, so another user's request never gets it")
    func cookieRequestsAreNotShared() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/private"
            server.script(
                "/private",
                [
                    .respond(status: 200, headers: [.init("Cache-Control", "max-age=3600")], body: Array("alice's".utf8)),
                    .respond(status: 200, headers: [.init("Cache-Control", "max-age=3600")], body: Array("bob's".utf8)),
                    .respond(status: 200, headers: [.init("Cache-Control", "public, max-age=3600")], body: Array("everyone's".utf8)),
                ]
            )
            let alice = await CachedGet(url, session: session, headers: ["Cookie": "user=alice"]).response()
            #expect(alice.data == Data("alice's".utf8))
            let bob = await CachedGet(url, session: session, headers: ["Cookie": "user=bob"]).response()
            #expect(bob.source == .network)
            #expect(bob.data == Data("bob's".utf8))
            // A response that says `public` may be stored and shared.
            _ = await CachedGet(url, session: session, headers: ["Cookie": "user=carol"]).response()
            let shared = await CachedGet(url, session: session, headers: ["Cookie": "user=dave"]).response()
            #expect(shared.source == .cache)
            #expect(shared.data == Data("everyone's".utf8))
        }
    }

    @Test("a stored response's Set-Cookie is never replayed from the cache")
    func setCookieIsNotReplayed() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/sets-cookie"
            server.script(
                "/sets-cookie",
                [.respond(status: 200, headers: [.init("Cache-Control", "max-age=3600"), .init("Set-Cookie", "session=secret")], body: Array("page".utf8))]
            )
            let first = await CachedGet(url, session: session).response()
            #expect(first.headers[.setCookie] == "session=secret")
            let second = await CachedGet(url, session: session).response()
            #expect(second.source == .cache)
            #expect(second.data == Data("page".utf8))
            #expect(second.headers[.setCookie] == nil)
        }
    }

    @Test("a redirect's own rules count: after a 302 (no-store, or plain) to a fresh target, the URL asked for is not answered from the cache")
    func redirectIsNotStoredUnderTheOriginalURL() async throws {
        try await withServer { server in
            let session = Session()
            for (index, control) in ["no-store", nil].enumerated() {
                let start = "/start\(index)"
                var headers: [ScriptedResponse.HeaderPair] = [.init("Location", "/target\(index)a")]
                if let control { headers.append(.init("Cache-Control", control)) }
                var moved = headers
                moved[0] = .init("Location", "/target\(index)b")
                server.script(start, [.respond(status: 302, headers: headers), .respond(status: 302, headers: moved)])
                for (suffix, body) in [("a", "A"), ("b", "B")] {
                    server.script("/target\(index)\(suffix)", [.respond(status: 200, headers: [.init("Cache-Control", "max-age=3600")], body: Array(body.utf8))])
                }
                let first = await CachedGet(server.baseURL + start, session: session).response()
                #expect(first.data == Data("A".utf8))
                // The Location changed: the next request sees it.
                let second = await CachedGet(server.baseURL + start, session: session).response()
                #expect(second.source == .network)
                #expect(second.data == Data("B".utf8))
                #expect(server.requests(path: start).count == 2)
                // The target itself was stored under its own URL.
                let target = await CachedGet(server.baseURL + "/target\(index)a", session: session).response()
                #expect(target.source == .cache)
                #expect(target.data == Data("A".utf8))
            }
        }
    }
}
