import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

@Suite("CurlTransport: cookies", .timeLimit(.minutes(2)))
struct CurlTransportCookieTests {
    static func storingTransport() -> CurlTransport {
        var configuration = CurlTransport.Configuration()
        configuration.storesCookies = true
        return CurlTransport(configuration: configuration)
    }

    /// `/response-headers` answering with this `Set-Cookie`.
    static func setting(_ cookie: String, on server: BrickTestServer) -> String {
        let encoded = cookie.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? cookie
        return server.baseURL + "/response-headers?Set-Cookie=" + encoded
    }

    @Test("a cookie a server sets is sent back to it, listed, and not sent to another host")
    func setAndSentBack() async throws {
        try await withServer { server in
            let transport = Self.storingTransport()
            _ = try await transport.send(try get(Self.setting("session=abc; Path=/; HttpOnly", on: server)))
            _ = try await transport.send(try get(server.baseURL + "/anything/a"))
            // The same server under another name is another host.
            _ = try await transport.send(try get("http://localhost:\(server.port)/anything/b"))
            let cookies = await transport.cookies()
            #expect(server.requests(path: "/anything/a").first?.header("Cookie") == "session=abc")
            #expect(server.requests(path: "/anything/b").first?.header("Cookie") == nil)
            #expect(cookies.count == 1)
            let cookie = try #require(cookies.first)
            #expect(cookie.name == "session")
            #expect(cookie.value == "abc")
            #expect(cookie.domain == "127.0.0.1")
            #expect(cookie.path == "/")
            #expect(cookie.isHTTPOnly)
            #expect(!cookie.isSecure)
            #expect(cookie.expires == nil)
        }
    }

    @Test("removeAllCookies forgets them; an expired Set-Cookie deletes one; each transport has its own")
    func removal() async throws {
        try await withServer { server in
            let transport = Self.storingTransport()
            let other = Self.storingTransport()
            _ = try await transport.send(try get(Self.setting("a=1; Max-Age=3600", on: server)))
            _ = try await transport.send(try get(Self.setting("b=2", on: server)))
            let both = await transport.cookies()
            let othersBefore = await other.cookies()
            _ = try await transport.send(try get(Self.setting("a=; Max-Age=0", on: server)))
            let afterExpiry = await transport.cookies()
            await transport.removeAllCookies()
            let afterRemoval = await transport.cookies()
            _ = try await transport.send(try get(server.baseURL + "/anything/after"))
            #expect(Set(both.map(\.name)) == ["a", "b"])
            #expect(both.first { $0.name == "a" }?.expires.map { $0 > Date() } == true)
            #expect(othersBefore.isEmpty)
            #expect(afterExpiry.map(\.name) == ["b"])
            #expect(afterRemoval.isEmpty)
            #expect(server.requests(path: "/anything/after").first?.header("Cookie") == nil)
        }
    }

    @Test("by default a transport keeps no cookies")
    func offByDefault() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            _ = try await transport.send(try get(Self.setting("session=abc", on: server)))
            _ = try await transport.send(try get(server.baseURL + "/anything/c"))
            let cookies = await transport.cookies()
            #expect(server.requests(path: "/anything/c").first?.header("Cookie") == nil)
            #expect(cookies.isEmpty)
        }
    }
}
