import BrickRequest
import BrickTestSupport
import Foundation
import Testing

@Suite("CurlTransport against nginx: TLS, HTTP/2, pinning, client certificates", .timeLimit(.minutes(5)))
struct TLSAndHTTP2Tests {
    let nginx: NginxFixture

    /// nginx starts (certificates, then the server) on a thread of its own: a cooperative thread
    /// held for it — and every other test of the suite waiting in the same lazy initialiser — had
    /// stalled the whole pool for half a minute of a loaded run (PoolWatchdog's stacks).
    init() async throws {
        nginx = try await Subprocess.offPool { try NginxFixture.shared.get() }
    }

    func transport(_ configure: (inout CurlTransport.Configuration) -> Void = { _ in }) -> CurlTransport {
        var configuration = CurlTransport.Configuration()
        configure(&configuration)
        return CurlTransport(configuration: configuration)
    }

    func small(_ port: Int? = nil) throws(TransportError) -> TransportRequest {
        try TransportRequest(method: .get, url: "https://127.0.0.1:\(port ?? nginx.httpsPort)/small")
    }

    @Test("verification is on by default: an unknown CA fails, the right CA succeeds")
    func verification() async throws {
        let request = try small()
        let untrusted: Result<TransportResponse, TransportError>
        do { untrusted = .success(try await transport().send(request)) } catch { untrusted = .failure(error) }
        guard case .failure(let error) = untrusted else {
            Issue.record("a certificate from an unknown CA was accepted")
            return
        }
        #expect(error.kind == .tls)
        #expect(error.curlCode == 60)
        let trusted = try await transport { $0.tls.caFile = nginx.caFile }.send(try small())
        #expect(trusted.status == .ok)
        #expect(trusted.body?.count == 128)
        #expect(trusted.metrics.tlsHandshake > .zero)
    }

    @Test("a CA directory works like a CA file")
    func caPath() async throws {
        let response = try await transport { $0.tls.caPath = nginx.caDirectory }.send(try small())
        #expect(response.status == .ok)
    }

    @Test("HTTP/2 is negotiated, and 100 concurrent requests share one connection")
    func http2Multiplexing() async throws {
        let client = transport { $0.tls.caFile = nginx.caFile }
        let request = try small()
        let responses = try await withThrowingTaskGroup(of: TransportResponse.self) { group in
            for _ in 0..<100 { group.addTask { try await client.send(request) } }
            var all: [TransportResponse] = []
            for try await response in group { all.append(response) }
            return all
        }
        #expect(responses.count == 100)
        #expect(responses.allSatisfy { $0.status == .ok && $0.body?.count == 128 })
        #expect(responses.allSatisfy { $0.metrics.httpVersion == .http2 })
        #expect(responses.filter { !$0.metrics.connectionReused }.count == 1)
    }

    @Test("HTTP/1.1 can be forced")
    func http1() async throws {
        let response = try await transport {
            $0.tls.caFile = nginx.caFile
            $0.httpVersion = .http1_1
        }.send(try small())
        #expect(response.metrics.httpVersion == .http1_1)
    }

    @Test("public-key pinning: the right pin passes, a wrong pin fails")
    func pinning() async throws {
        let pin = try nginx.serverPin()
        let pinned = try await transport {
            $0.tls.caFile = nginx.caFile
            $0.tls.pinnedPublicKeys = ["sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", pin]
        }.send(try small())
        #expect(pinned.status == .ok)
        let request = try small()
        do {
            _ = try await transport {
                $0.tls.caFile = nginx.caFile
                $0.tls.pinnedPublicKeys = ["sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]
            }.send(request)
            Issue.record("a wrong pin was accepted")
        } catch {
            #expect(error.kind == .tls)
            #expect(error.curlCode == 90)
        }
    }

    @Test("a client certificate is presented when configured")
    func clientCertificate() async throws {
        let without = try await transport { $0.tls.caFile = nginx.caFile }.send(try small(nginx.mutualTLSPort))
        #expect(without.status == .badRequest)  // nginx: "No required SSL certificate was sent"
        let with = try await transport {
            $0.tls.caFile = nginx.caFile
            $0.tls.clientCertificate = .init(certificatePath: nginx.clientCertificate, privateKeyPath: nginx.clientKey)
        }.send(try small(nginx.mutualTLSPort))
        #expect(with.status == .ok)
    }

    @Test("a redirect from https to http is refused unless allowed")
    func downgrade() async throws {
        let request = try TransportRequest(method: .get, url: "https://127.0.0.1:\(nginx.httpsPort)/to-http")
        do {
            _ = try await transport { $0.tls.caFile = nginx.caFile }.send(request)
            Issue.record("an https to http redirect was followed")
        } catch {
            #expect(error.kind == .redirectRefused)
        }
        let allowed = try await transport {
            $0.tls.caFile = nginx.caFile
            $0.redirects.allowsHTTPSToHTTP = true
        }.send(request)
        #expect(allowed.status == .ok)
        #expect(allowed.url == "http://127.0.0.1:\(nginx.httpPort)/small")
    }
}
