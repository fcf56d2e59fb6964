import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// A multipart upload to the test server with one file part.
final class InjectedUpload: Component, POSTRequestType, MultipartRequestType, EmptyResponseType {
    let urlString: String
    init(_ url: String, mimeType: String) {
        self.urlString = url
        var parameters = ParameterBuilder()
        parameters.add(FileParameter(data: Data("content".utf8), name: "file", mimeType: mimeType))
        super.init(parameterBuilder: parameters)
    }
}

/// Input a caller or a server gets wrong, refused with a typed error that gives nothing away.
@Suite("Hostile input: refused before any I/O, with errors that give nothing away", .timeLimit(.minutes(2)))
struct HostileInputTests {
    @Test("CR or LF in a file part's media type is refused when rendering; nothing is sent")
    func multipartMediaTypeInjection() async throws {
        try await withServer { server in
            let response = await InjectedUpload(server.baseURL + "/post", mimeType: "text/plain\r\n\r\nINJECTED")
                .response()
            #expect(response.error?.code == .invalidRequest)
            #expect(response.error?.message.contains("media type") == true)
            #expect(server.requestCount == 0)
            // A clean media type goes out as it is.
            let clean = await InjectedUpload(server.baseURL + "/post", mimeType: "text/plain").response()
            #expect(clean.error == nil)
            #expect(server.requestCount == 1)
        }
    }

    @Test("a header name carrying a credential is not echoed whole in the error")
    func headerNameRedacted() {
        #expect(throws: TransportError.self) {
            _ = try TransportRequest(
                method: .get,
                url: "http://127.0.0.1/",
                headers: [("Authorization: Bearer s3cret", "x")]
            )
        }
        do {
            _ = try TransportRequest(method: .get, url: "http://127.0.0.1/", headers: [("Authorization: Bearer s3cret", "x")])
        } catch {
            #expect(error.kind == .invalidRequest)
            #expect(!error.message.contains("s3cret"))
            #expect(!error.message.contains("Bearer"))
            #expect(error.message.contains("\"Authorization\""))
        }
    }

    @Test("control characters in a header value are refused, not turned into spaces", arguments: [0x01, 0x1F, 0x7F])
    func controlCharactersRefused(_ byte: Int) {
        let value = "a" + String(UnicodeScalar(UInt8(byte))) + "b"
        #expect {
            _ = try TransportRequest(method: .get, url: "http://127.0.0.1/", headers: [("X-Value", value)])
        } throws: { error in
            (error as? TransportError)?.kind == .invalidRequest
        }
        // A tab is allowed (optional whitespace).
        #expect(throws: Never.self) {
            _ = try TransportRequest(method: .get, url: "http://127.0.0.1/", headers: [("X-Value", "a\tb")])
        }
    }

    @Test("a non-ASCII host is told to use its punycode form; a non-ASCII path to percent-encode")
    func nonASCIIAdvice() {
        do {
            _ = try TransportRequest(method: .get, url: "http://bücher.example/")
            Issue.record("accepted a non-ASCII host")
        } catch {
            #expect(error.message.contains("punycode"))
        }
        do {
            _ = try TransportRequest(method: .get, url: "http://example.com/bücher")
            Issue.record("accepted a non-ASCII path")
        } catch {
            #expect(error.message.contains("percent-encode"))
        }
    }

    @Test("a URL with two ports is refused; a redirect to one fails as a refused redirect after the request was sent")
    func twoPorts() async throws {
        #expect {
            _ = try TransportRequest(method: .get, url: "http://127.0.0.1:80:81/")
        } throws: { error in
            (error as? TransportError)?.message.contains("more than one port") == true
        }
        try await withServer { server in
            server.script(
                "/hop",
                [.respond(status: 302, headers: [.init("Location", "http://127.0.0.1:80:81/x")])]
            )
            let error = try #require(await CurlTransport().result(try get(server.baseURL + "/hop")).failure)
            #expect(error.kind == .redirectRefused)
            #expect(error.requestBytesSent)
        }
    }
}
