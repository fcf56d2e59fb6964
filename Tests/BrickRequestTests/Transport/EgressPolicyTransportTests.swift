import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// A listener standing for something internal (a database, an admin page, a metadata service):
/// it counts every connection it accepts and answers each with `internal`.
final class InternalListener: Sendable {
    let port: Int
    private let socketDescriptor: Int32
    private final class Count: Sendable { let value = Atomic(0) }
    private let accepts = Count()

    /// Connections accepted so far.
    var acceptCount: Int { accepts.value.load(ordering: .acquiring) }

    /// Listens on `address` (`127.0.0.1` or `::1`), on `port` (0: any).
    init(address: String, port: Int = 0) throws {
        let v6 = address.contains(":")
        let listener = socket(v6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var storage = sockaddr_storage()
        var length: socklen_t
        if v6 {
            var address6 = sockaddr_in6()
            address6.sin6_family = sa_family_t(AF_INET6)
            address6.sin6_port = UInt16(port).bigEndian
            inet_pton(AF_INET6, address, &address6.sin6_addr)
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeBytes(of: address6) { bytes in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) } }
        } else {
            var address4 = sockaddr_in()
            address4.sin_family = sa_family_t(AF_INET)
            address4.sin_port = UInt16(port).bigEndian
            address4.sin_addr.s_addr = inet_addr(address)
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeBytes(of: address4) { bytes in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) } }
        }
        let bound = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, length) == 0 && listen(listener, 64) == 0 && getsockname(listener, pointer, &length) == 0
            }
        }
        guard bound else {
            close(listener)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        self.port = withUnsafeBytes(of: storage) { Int(UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self))) }
        socketDescriptor = listener
        let counter = accepts
        Thread.detachNewThread { [counter] in
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 { return }
                counter.value.add(1, ordering: .releasing)
                var buffer = [UInt8](repeating: 0, count: 4096)
                _ = read(client, &buffer, buffer.count)
                let answer = Array("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\ninternal".utf8)
                _ = answer.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
                close(client)
            }
        }
    }

    deinit {
        shutdown(socketDescriptor, Int32(SHUT_RDWR))
        close(socketDescriptor)
    }
}

@Suite("Egress policy: refused on the address connected, with nothing sent", .timeLimit(.minutes(2)))
struct EgressPolicyTransportTests {
    /// `127.0.0.2` plays the public internet: on the allow list.
    static let policy = EgressPolicy.publicInternetOnly(allowing: ["127.0.0.2"])

    private func transport(_ overrides: [(String, Int, [String])] = []) throws -> CurlTransport {
        var configuration = CurlTransport.Configuration()
        configuration.proxy = .none
        configuration.hostOverrides = try overrides.map { try CurlTransport.HostOverride(host: $0.0, port: $0.1, addresses: $0.2) }
        return CurlTransport(configuration: configuration)
    }

    private func request(_ url: String, _ policy: EgressPolicy?) throws -> TransportRequest {
        var request = try TransportRequest(method: .get, url: url)
        request.options.egressPolicy = policy
        return request
    }

    @Test("a name resolving to 127.0.0.1, ::1 or ::ffff:127.0.0.1 is refused before connect; unrestricted, the same requests arrive")
    func loopbackNames() async throws {
        let internal4 = try InternalListener(address: "127.0.0.1")
        let internal6 = try InternalListener(address: "::1")
        let transport = try transport([
            ("v4.brick.test", internal4.port, ["127.0.0.1"]),
            ("v6.brick.test", internal6.port, ["::1"]),
            ("mapped.brick.test", internal4.port, ["::ffff:127.0.0.1"]),
        ])
        let urls = [
            ("http://v4.brick.test:\(internal4.port)/", "127.0.0.1 is loopback"),
            ("http://v6.brick.test:\(internal6.port)/", "::1 is loopback"),
            ("http://mapped.brick.test:\(internal4.port)/", "::ffff:127.0.0.1 is loopback (IPv4-mapped form)"),
        ]
        for (url, reason) in urls {
            let error = try #require(await transport.result(try request(url, Self.policy)).failure, "\(url)")
            #expect(error.kind == .egressRefused, "\(url): \(error)")
            #expect(error.message.contains(reason), "\(error.message)")
            #expect(!error.requestBytesSent)
            #expect(BrickError.transport(error).code == .egressRefused)
        }
        #expect(internal4.acceptCount == 0)
        #expect(internal6.acceptCount == 0)
        for (url, _) in urls {
            let response = try await transport.send(try request(url, .unrestricted))
            #expect(response.body.map { String(decoding: $0, as: UTF8.self) } == "internal")
        }
        #expect(internal4.acceptCount == 2)
        #expect(internal6.acceptCount == 1)
    }

    @Test("decimal, hexadecimal, octal and short spellings of 127.0.0.1 in a URL are the same address, refused")
    func oddSpellings() async throws {
        let listener = try InternalListener(address: "127.0.0.1")
        let transport = try transport()
        var tried = 0
        for host in ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.0.0.1"] {
            let url = "http://\(host):\(listener.port)/"
            guard let request = try? request(url, Self.policy) else { continue }  // refused as a URL: fine too
            tried += 1
            let error = try #require(await transport.result(request).failure, "\(url)")
            #expect(error.kind == .egressRefused, "\(url): \(error)")
        }
        #expect(tried == 5, "every spelling is a URL libcurl accepts")
        #expect(listener.acceptCount == 0)
    }

    @Test("the allowed public endpoint answers; its 302 to 127.0.0.1 is refused at the hop, nothing accepted there")
    func redirectHop() async throws {
        let listener = try InternalListener(address: "127.0.0.1")
        let public2 = try await BrickTestServer.start(address: "127.0.0.2")
        defer { public2.shutdown() }
        public2.script("/hook", [.respond(status: 302, headers: [.init("Location", "http://127.0.0.1:\(listener.port)/admin")])])
        public2.script("/ok", [.ok("public")])
        let transport = try transport()
        let fine = try await transport.send(try request("http://127.0.0.2:\(public2.port)/ok", Self.policy))
        #expect(fine.body.map { String(decoding: $0, as: UTF8.self) } == "public")
        let error = try #require(await transport.result(try request("http://127.0.0.2:\(public2.port)/hook", Self.policy)).failure)
        #expect(error.kind == .egressRefused, "\(error)")
        #expect(error.message.contains("127.0.0.1 is loopback"), "\(error.message)")
        #expect(error.requestBytesSent, "the first hop was sent")
        #expect(listener.acceptCount == 0)
        // Unrestricted, the hop is followed to the internal listener.
        public2.script("/hook", [.respond(status: 302, headers: [.init("Location", "http://127.0.0.1:\(listener.port)/admin")])])
        let followed = try await transport.send(try request("http://127.0.0.2:\(public2.port)/hook", nil))
        #expect(followed.body.map { String(decoding: $0, as: UTF8.self) } == "internal")
        #expect(listener.acceptCount == 1)
    }

    @Test("a reused connection is checked again: one opened unrestricted is not ridden by a restricted request")
    func reusedConnection() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        server.route("/x") { _ in .ok("x") }
        let transport = try transport()
        _ = try await transport.send(try request(server.baseURL + "/x", nil))
        let error = try #require(await transport.result(try request(server.baseURL + "/x", Self.policy)).failure)
        #expect(error.kind == .egressRefused, "\(error)")
        #expect(server.requests(path: "/x").count == 1)
    }

    @Test("a deny list refuses under unrestricted too, by range and by name")
    func denyList() async throws {
        let listener = try InternalListener(address: "127.0.0.1")
        let transport = try transport([("db.brick.test", listener.port, ["127.0.0.1"])])
        let byRange = EgressPolicy.unrestricted(denying: ["127.0.0.0/8"])
        let byName = EgressPolicy.unrestricted(denying: ["*.brick.test"])
        for policy in [byRange, byName] {
            let error = try #require(await transport.result(try request("http://db.brick.test:\(listener.port)/", policy)).failure)
            #expect(error.kind == .egressRefused)
            #expect(error.message.contains("deny list"), "\(error.message)")
        }
        #expect(listener.acceptCount == 0)
    }

    @Test("through a proxy the policy does not trust: refused before anything is sent; trusted, it goes through the proxy")
    func proxy() async throws {
        let proxy = try InternalListener(address: "127.0.0.1")
        var configuration = CurlTransport.Configuration()
        configuration.proxy = .url("http://127.0.0.1:\(proxy.port)")
        let transport = CurlTransport(configuration: configuration)
        let error = try #require(await transport.result(try request("http://hooks.example/", Self.policy)).failure)
        #expect(error.kind == .egressRefused)
        #expect(error.message.contains("through the proxy"), "\(error.message)")
        #expect(proxy.acceptCount == 0)
        let response = try await transport.send(try request("http://hooks.example/", Self.policy.trustingProxy()))
        #expect(response.status == .ok)
        #expect(proxy.acceptCount == 1)
    }

    @Test("through a session: BrickError.egressRefused, never retried; the endpoint's policy wins over the session's")
    func session() async throws {
        let listener = try InternalListener(address: "127.0.0.1")
        var configuration = Session.Configuration()
        configuration.transport.proxy = .none
        configuration.egressPolicy = .publicInternetOnly
        let session = Session(configuration: configuration)
        let refused = await EgressGet("http://127.0.0.1:\(listener.port)/", session: session, policy: nil).response()
        #expect(refused.error?.code == .egressRefused, "\(String(describing: refused.error))")
        #expect(refused.retryCount == 0)
        #expect(listener.acceptCount == 0)
        let allowed = await EgressGet("http://127.0.0.1:\(listener.port)/", session: session, policy: .unrestricted).response()
        #expect(allowed.value.map { String(decoding: $0, as: UTF8.self) } == "internal")
        #expect(listener.acceptCount == 1)
    }
}

final class EgressGet: Component, GETRequestType, SoftAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    let egressPolicy: EgressPolicy?
    var autoRetryConfiguration: AutoRetryConfiguration { AutoRetryConfiguration(breakTime: .milliseconds(10), maxRetryCount: 3) }

    init(_ url: String, session: Session, policy: EgressPolicy?) {
        urlString = url
        self.session = session
        egressPolicy = policy
        super.init()
    }
}
