import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

@Suite("CurlTransport: host overrides", .timeLimit(.minutes(2)))
struct CurlTransportHostOverrideTests {
    @Test("a host name connects to the addresses given for it, tried in order; Host stays the name")
    func overridden() async throws {
        try await withServer { server in
            var configuration = CurlTransport.Configuration()
            configuration.hostOverrides = [
                try CurlTransport.HostOverride(host: "api.brick.test", port: server.port, addresses: ["127.0.0.1"]),
                // Nobody listens on ::1 here: the next address is tried.
                try CurlTransport.HostOverride(
                    host: "v6.brick.test",
                    port: server.port,
                    addresses: ["::1", "127.0.0.1"]
                ),
            ]
            let transport = CurlTransport(configuration: configuration)
            let first = try await transport.send(try get("http://api.brick.test:\(server.port)/anything/one"))
            let second = try await transport.send(try get("http://v6.brick.test:\(server.port)/anything/two"))
            #expect(first.status == .ok)
            #expect(second.status == .ok)
            #expect(server.requests(path: "/anything/one").first?.header("Host") == "api.brick.test:\(server.port)")
            #expect(server.requests(path: "/anything/two").first?.header("Host") == "v6.brick.test:\(server.port)")
        }
    }

    @Test(
        "an override that libcurl could not read is refused when it is made",
        arguments: [
            ("api.test:1", 80, ["127.0.0.1"]), ("", 80, ["127.0.0.1"]), ("a b", 80, ["127.0.0.1"]),
            ("api.test", 0, ["127.0.0.1"]), ("api.test", 70_000, ["127.0.0.1"]), ("api.test", 80, []),
            ("api.test", 80, ["1.2.3"]), ("api.test", 80, ["example.com"]), ("api.test", 80, ["[::1]"]),
        ]
    )
    func invalid(host: String, port: Int, addresses: [String]) {
        var failure: TransportError?
        do throws(TransportError) {
            _ = try CurlTransport.HostOverride(host: host, port: port, addresses: addresses)
        } catch {
            failure = error
        }
        #expect(failure?.kind == .invalidRequest)
        #expect(failure?.message.hasPrefix("host override: ") == true)
    }
}
