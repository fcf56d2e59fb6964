import BrickRequest
import Testing

@Suite("TLS failures described: what happened, before OpenSSL's text (table)", .timeLimit(.minutes(3)))
struct TLSDescriptionTests {
    static let rows: [(code: Int, message: String, expected: String?)] = [
        (35, "OpenSSL/3.0.22: error:0A00042E:SSL routines::tlsv1 alert protocol version",
         "TLS handshake failed: the server offers no TLS version this client accepts (TLS 1.2 or later): OpenSSL/3.0.22: error:0A00042E:SSL routines::tlsv1 alert protocol version"),
        (35, "error:0A000102:SSL routines::unsupported protocol",
         "TLS handshake failed: the server offers no TLS version this client accepts (TLS 1.2 or later): error:0A000102:SSL routines::unsupported protocol"),
        (35, "error:0A00010B:SSL routines::wrong version number",
         "TLS handshake failed: the server did not answer in TLS (plain HTTP on an https URL?): error:0A00010B:SSL routines::wrong version number"),
        (35, "OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:443 ",
         "TLS handshake failed: the server closed the connection during the handshake: OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:443 "),
        (35, "error:0A000410:SSL routines::sslv3 alert handshake failure",
         "TLS handshake failed: error:0A000410:SSL routines::sslv3 alert handshake failure"),
        (60, "SSL certificate problem: certificate has expired",
         "the server's certificate was refused: SSL certificate problem: certificate has expired"),
        (7, "Failed to connect", nil),
        (90, "SSL: public key does not match pinned public key", nil),
    ]

    @Test("every row", arguments: rows.indices)
    func row(_ index: Int) {
        let row = Self.rows[index]
        #expect(CurlErrorMapping.tlsDescription(code: row.code, message: row.message) == row.expected)
    }
}

@Suite("Timeouts named: connect, or the whole request's limit, before libcurl's text (table)", .timeLimit(.minutes(3)))
struct TimeoutDescriptionTests {
    static let rows: [(code: Int, message: String, connected: Bool, prefix: String?)] = [
        (28, "Connection timed out after 500 milliseconds", false, "connect timeout: no connection was established in time: "),
        (28, "Resolving timed out after 5000 milliseconds", false, "connect timeout: the host name was not resolved in time: "),
        (28, "Operation timed out after 300 milliseconds with 0 bytes received", true, "request timeout: the whole request took longer than its limit: "),
        // Still waiting for a connection slot when the whole request's limit expired.
        (28, "Operation timed out after 300 milliseconds with 0 bytes received", false, "request timeout: the whole request took longer than its limit: "),
        (28, "Failed to connect to 127.0.0.1 port 9: timed out", false, "connect timeout: no connection was established in time: "),
        (28, "some future wording", true, "request timeout: the whole request took longer than its limit: "),
        (7, "Failed to connect", false, nil),
    ]

    @Test("every row", arguments: rows.indices)
    func row(_ index: Int) {
        let row = Self.rows[index]
        let described = CurlErrorMapping.timeoutDescription(code: row.code, message: row.message, connected: row.connected)
        #expect(described == row.prefix.map { $0 + row.message })
    }
}

@Suite("HTTP/2 stream resets classified by their RFC 9113 code (table)", .timeLimit(.minutes(3)))
struct HTTP2StreamResetTests {
    static let rows: [(message: String, kind: TransportError.Kind, processed: Bool)] = [
        ("HTTP/2 stream 3 was not closed cleanly: REFUSED_STREAM (err 7)", .connectionReset, false),
        ("HTTP/2 stream 1 was not closed cleanly: INTERNAL_ERROR (err 2)", .connectionReset, true),
        ("HTTP/2 stream 1 was not closed cleanly: CANCEL (err 8)", .connectionReset, true),
        ("HTTP/2 stream 1 was not closed cleanly: ENHANCE_YOUR_CALM (err 11)", .connectionReset, true),
        ("HTTP/2 stream 1 was not closed cleanly: NO_ERROR (err 0)", .connectionReset, true),
        ("HTTP/2 stream 5 was not closed cleanly: PROTOCOL_ERROR (err 1)", .invalidResponse, true),
        ("HTTP/2 stream 5 was not closed cleanly: FLOW_CONTROL_ERROR (err 3)", .invalidResponse, true),
        ("HTTP/2 stream 5 was not closed cleanly: COMPRESSION_ERROR (err 9)", .invalidResponse, true),
        ("HTTP/2 stream 5 was not closed cleanly: HTTP_1_1_REQUIRED (err 13)", .invalidResponse, true),
        ("HTTP/2 stream 5 was not closed cleanly: unknown (err 99)", .connectionReset, true),
        ("", .connectionReset, true),
    ]

    @Test("every row", arguments: rows.indices)
    func row(_ index: Int) {
        let row = Self.rows[index]
        let (kind, processed) = CurlErrorMapping.http2StreamReset(message: row.message)
        #expect(kind == row.kind, "\(row.message)")
        #expect(processed == row.processed, "\(row.message)")
    }
}

@Suite("libcurl giving up after its own tries: refused on every fresh connection, or maybe processed (table)", .timeLimit(.minutes(3)))
struct RetriesExhaustedTests {
    @Test("a transfer that never reused a connection was refused each time: nothing was processed")
    func freshConnection() throws {
        let message = "Connection died, tried 5 times before giving up"
        let fresh = try #require(CurlErrorMapping.retriesExhausted(message: message, freshConnection: true))
        #expect(fresh.processed == false)
        #expect(fresh.message.contains("REFUSED_STREAM") && fresh.message.hasSuffix(message), "\(fresh.message)")
        let reused = try #require(CurlErrorMapping.retriesExhausted(message: message, freshConnection: false))
        #expect(reused.processed == true)
        #expect(reused.message.contains("connection died") && reused.message.hasSuffix(message), "\(reused.message)")
    }

    @Test("any other message is not this case")
    func otherMessages() {
        for message in ["", "Recv failure: Connection reset by peer", "Connection died"] {
            #expect(CurlErrorMapping.retriesExhausted(message: message, freshConnection: true) == nil, "\(message)")
        }
    }
}

@Suite("The DNS cache's key of a URL: host:port of a name, none for an address (table)", .timeLimit(.minutes(3)))
struct DNSCacheNameTests {
    static let rows: [(url: String, name: String?)] = [
        ("http://api.example.com/v1?x=1", "api.example.com:80"),
        ("https://API.Example.com/v1", "api.example.com:443"),
        ("http://moving.brick.test:8080/who", "moving.brick.test:8080"),
        ("https://user:secret@api.example.com:8443#frag", "api.example.com:8443"),
        ("http://10.0.0.2:8080/", nil),
        ("http://[::1]:8080/", nil),
        ("not a url", nil),
    ]

    @Test("every row", arguments: rows.indices)
    func row(_ index: Int) {
        #expect(CurlDNSCache.name(of: Self.rows[index].url) == Self.rows[index].name, "\(Self.rows[index].url)")
    }
}
