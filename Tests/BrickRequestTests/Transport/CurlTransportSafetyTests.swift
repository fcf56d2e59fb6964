import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

@Suite("CurlTransport: input validation, limits, framing", .timeLimit(.minutes(2)))
struct CurlTransportSafetyTests {
    let transport = CurlTransport()

    @Test(
        "header values with CR, LF or NUL and invalid names are refused before any I/O",
        arguments: [
            ("X-Note", "a\r\nX-Injected: 1"), ("X-Note", "a\nb"), ("X-Note", "a\u{0}b"), ("X Note", "a"), ("", "a"),
            ("X-Note:", "a"),
        ]
    )
    func headerInjection(name: String, value: String) async throws {
        #expect {
            _ = try TransportRequest(method: .get, url: "http://127.0.0.1:1/", headers: [(name, value)])
        } throws: { error in
            (error as? TransportError)?.kind == .invalidRequest && !"\(error)".contains("Injected")
        }
    }

    @Test("conflicting Content-Length headers are refused")
    func conflictingContentLength() throws {
        #expect(throws: TransportError.self) {
            try TransportRequest(
                method: .post,
                url: "http://127.0.0.1:1/",
                headers: [("Content-Length", "5"), ("Content-Length", "7")]
            )
        }
    }

    @Test("a Content-Length that is not plain digits is refused", arguments: ["+5", "-5", "0x5", "five", ""])
    func contentLengthNotDigits(value: String) {
        #expect {
            try TransportRequest(
                method: .post,
                url: "http://127.0.0.1:1/",
                headers: [("Content-Length", value)],
                body: .data(Data("hello".utf8))
            )
        } throws: { error in
            (error as? TransportError)?.message == "Content-Length is not a number"
        }
    }

    @Test("a Content-Length that disagrees with the body is refused before sending")
    func lengthMismatch() async throws {
        try await withServer { server in
            let request = try TransportRequest(
                method: .post,
                url: server.baseURL + "/post",
                headers: [("Content-Length", "3")],
                body: .data(Data("hello".utf8))
            )
            let result = await transport.result(request)
            #expect(result.failure?.kind == .invalidRequest)
            #expect(server.requestCount == 0)
        }
    }

    @Test(
        "invalid URLs are refused before any I/O",
        arguments: [
            "http://exa mple.com/", "ftp://127.0.0.1/file", "file:///etc/passwd", "http://user:secret@127.0.0.1/",
            "http://127.0.0.1/\u{7}", "127.0.0.1/path", "http:///nohost", "http://127.0.0.1:99999/",
            "http://ex%2Fample.com/",
            "http://127.0.0.1/caf\u{E9}", "gopher://127.0.0.1/",
        ]
    )
    func invalidURL(url: String) throws {
        #expect {
            _ = try TransportRequest(method: .get, url: url)
        } throws: { error in
            (error as? TransportError)?.kind == .invalidRequest && !"\(error)".contains("secret")
        }
    }

    @Test(
        "an invalid URL's error says what is wrong",
        arguments: [
            ("http://exa mple.com/", "space or control character"),
            ("http://127.0.0.1/caf\u{E9}", "non-ASCII"),
            ("FTP://127.0.0.1/file", "scheme \"ftp\" is not http or https"),
            ("127.0.0.1:8080/path", "scheme \"127.0.0.1\" is not http or https"),
            ("127.0.0.1/path", "no scheme"),
            ("https:/x", "not an absolute URL"),
            ("http://user@127.0.0.1/", "credentials"),
            ("http://[::1/", "unterminated IPv6"),
            ("http://127.0.0.1:70000/", "port \"70000\""),
            ("http://:80/", "no host"),
        ]
    )
    func invalidURLMessages(url: String, reason: String) {
        #expect {
            _ = try TransportRequest(method: .get, url: url)
        } throws: { error in
            (error as? TransportError)?.message.contains(reason) == true
        }
    }

    @Test(
        "a URL that passes our checks but not libcurl's parser fails before any I/O; its handle still works",
        arguments: [("http://exa<mple.com/", "Bad hostname"), ("http://[zz]/x", "Bad IPv6 address")]
    )
    func urlRefusedByLibcurl(url: String, reason: String) async throws {
        try await withServer { server in
            // One easy handle for all three requests: the refusal comes from parsing the URL into
            // it, between two successful transfers to the same URL.
            let transport = curlTransport { $0.maxIdleHandles = 1 }
            let good = try get(server.baseURL + "/anything/same?q=1")
            #expect(try await transport.send(good).status == .ok)
            let result = await transport.result(try TransportRequest(method: .get, url: url))
            #expect(result.failure?.kind == .invalidRequest)
            #expect(result.failure?.message == "invalid URL: libcurl refused it (\(reason))")
            #expect(result.failure?.requestBytesSent == false)
            #expect(try await transport.send(good).status == .ok)
            #expect(server.requests.map(\.uri) == ["/anything/same?q=1", "/anything/same?q=1"])
            #expect(transport.easyHandleCount == 1)
        }
    }

    @Test("URL bytes are checked and the fragment found exactly as a byte-by-byte reading would")
    func urlScanMatchesReference() throws {
        // The validator reads eight bytes at a time; compare it with the plain rule on random URLs
        // whose odd bytes fall at every position of a word and in the tail.
        let alphabet: [String] = [
            "a", "Z", "0", "/", "?", "=", "&", "#", "%41", "~", " ", "\t", "\u{7F}", "\u{1}", "é", "日",
        ]
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ bound: Int) -> Int {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return Int(state % UInt64(bound))
        }
        for _ in 0..<3_000 {
            let prefix = "http://h.test" + String(repeating: "/p", count: next(6))
            let suffix = (0..<next(40)).map { _ in alphabet[next(alphabet.count)] }.joined()
            let url = prefix + "/" + suffix
            let firstRefused = url.utf8.first { $0 < 0x21 || $0 > 0x7E }
            do {
                let request = try TransportRequest(method: .get, url: url)
                #expect(firstRefused == nil, "accepted \(url.debugDescription)")
                let kept = url.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                #expect(request.urlString == String(kept))
            } catch {
                let expected = (firstRefused ?? 0) >= 0x80 ? "non-ASCII" : "space or control character"
                #expect(firstRefused != nil && error.message.contains(expected), "\(url.debugDescription): \(error)")
            }
        }
    }

    @Test("valid URLs keep their path and query and drop the fragment")
    func validURL() throws {
        let request = try TransportRequest(method: .get, url: "HTTPS://Example.com:8443?q=1#frag")
        #expect(request.head.scheme == "https")
        #expect(request.head.authority == "Example.com:8443")
        #expect(request.head.path == "/?q=1")
        #expect(request.urlString == "https://Example.com:8443/?q=1")
        let ipv6 = try TransportRequest(method: .get, url: "http://[::1]:8080/a/b")
        #expect(ipv6.head.authority == "[::1]:8080")
        #expect(ipv6.host == "::1")
        let long = try TransportRequest(
            method: .get,
            url: "https://api.example-service.test:8443/v1/users/12345?include=profile&fields=a,b"
        )
        #expect(long.head.scheme == "https")
        #expect(long.head.authority == "api.example-service.test:8443")
        #expect(long.head.path == "/v1/users/12345?include=profile&fields=a,b")
        #expect(long.host == "api.example-service.test")
        #expect(long.urlString == "https://api.example-service.test:8443/v1/users/12345?include=profile&fields=a,b")
    }

    @Test(
        "urlString is the canonical URL whatever the input's form, and follows changes to head",
        arguments: [
            ("http://a.test/p?q=1", "http://a.test/p?q=1"),
            ("https://a.test:8443/", "https://a.test:8443/"),
            ("Http://a.test/p", "http://a.test/p"),
            ("httpS://a.test/p", "https://a.test/p"),
            ("http://a.test", "http://a.test/"),
            ("http://a.test?x", "http://a.test/?x"),
            ("http://a.test/p#f", "http://a.test/p"),
        ]
    )
    func canonicalURLString(input: String, expected: String) throws {
        var request = try TransportRequest(method: .get, url: input)
        #expect(request.urlString == expected)
        request.head.path = "/other"
        request.head.authority = "b.test:81"
        let scheme = expected.hasPrefix("https") ? "https" : "http"
        #expect(request.urlString == scheme + "://b.test:81/other")
    }

    @Test("method and headerFields are the head's, read or written either way")
    func headParts() throws {
        var request = try TransportRequest(
            method: .post,
            url: "https://a.test/p?q=1",
            headers: [("X-One", "1"), ("X-One", "2")]
        )
        #expect(request.method == .post && request.head.method == .post)
        #expect(request.headerFields[values: HTTPField.Name("X-One")!] == ["1", "2"])
        #expect(request.head.headerFields == request.headerFields)
        request.method = .put
        request.headerFields[.authorization] = "Bearer t"
        #expect(request.head.method == .put)
        #expect(request.head.headerFields[.authorization] == "Bearer t")
        #expect(request.head.scheme == "https" && request.head.path == "/p?q=1")
        var head = request.head
        head.method = .delete
        head.headerFields = [.accept: "text/plain"]
        request.head = head
        #expect(request.method == .delete)
        #expect(request.headerFields == [.accept: "text/plain"])
        #expect(request.urlString == "https://a.test/p?q=1")
        #expect(request.isIdempotent)
    }

    @Test("a gzip bomb stops at the limit on decoded bytes")
    func gzipBomb() async throws {
        try await withServer { server in
            let options = TransportRequest.Options(maxResponseSize: 1_000_000)
            // 20 MB of zeros are about 20 KB on the wire: far below the limit before decoding.
            let result = await transport.result(try get(server.baseURL + "/gzip?zeros=20000000", options: options))
            #expect(result.failure?.kind == .bodyTooLarge)
        }
    }

    @Test("a chunked body without Content-Length stops at the limit")
    func chunkedLimit() async throws {
        try await withServer { server in
            let options = TransportRequest.Options(maxResponseSize: 100_000)
            let result = await transport.result(try get(server.baseURL + "/stream-bytes/5000000", options: options))
            #expect(result.failure?.kind == .bodyTooLarge)
            let fine = try await transport.send(try get(server.baseURL + "/stream-bytes/100000", options: options))
            #expect(fine.body?.count == 100_000)
        }
    }

    @Test("a Content-Length above the limit fails early")
    func contentLengthLimit() async throws {
        try await withServer { server in
            let options = TransportRequest.Options(maxResponseSize: 1000)
            let result = await transport.result(try get(server.baseURL + "/bytes/5000", options: options))
            #expect(result.failure?.kind == .bodyTooLarge)
        }
    }

    @Test("gzip responses are decoded")
    func gzip() async throws {
        try await withServer { server in
            let response = try await transport.send(try get(server.baseURL + "/gzip"))
            let echo = try json(response.body)
            #expect(echo["gzipped"] as? Bool == true)
            #expect(server.requests.last?.header("Accept-Encoding")?.contains("gzip") == true)
        }
    }

    @Test("a response with conflicting Content-Length headers is rejected")
    func responseFraming() async throws {
        try await withServer { server in
            server.script(
                "/dup",
                [.raw(Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhello".utf8))]
            )
            let result = await transport.result(try get(server.baseURL + "/dup"))
            #expect(result.failure?.kind == .invalidResponse)
            // Field names are case-insensitive; our own check (not libcurl's) says why.
            server.script(
                "/dup-case",
                [.raw(Array("HTTP/1.1 200 OK\r\ncontent-LENGTH: 2\r\nCONTENT-length:5\r\n\r\nhello".utf8))]
            )
            let mixed = await transport.result(try get(server.baseURL + "/dup-case"))
            #expect(mixed.failure?.kind == .invalidResponse)
            #expect(mixed.failure?.message.contains("conflicting Content-Length") == true)
            // The same length twice is not a conflict.
            server.script(
                "/same",
                [.raw(Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhello".utf8))]
            )
            let same = await transport.result(try get(server.baseURL + "/same"))
            #expect((try? same.get())?.body == Data("hello".utf8))
        }
    }

    @Test("a malformed status line is an invalid response")
    func garbage() async throws {
        try await withServer { server in
            server.script("/garbage", [.raw(Array("HTTZ/9.9 OK\r\n\r\n".utf8))])
            let result = await transport.result(try get(server.baseURL + "/garbage"))
            #expect(result.failure?.kind == .invalidResponse)
        }
    }
}
