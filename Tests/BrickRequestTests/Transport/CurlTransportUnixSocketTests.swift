import BrickRequest
import BrickTestServer
import Foundation
import Testing

/// An endpoint of a local daemon reached through its Unix domain socket.
final class DaemonInfo: Component, GETRequestType, ValidatedResponseType, JSONResponseType {
    let session: Session
    var urlString: String { "http://localhost/anything/info" }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

@Suite("CurlTransport: Unix domain sockets", .timeLimit(.minutes(2)))
struct CurlTransportUnixSocketTests {
    /// Runs `body` with a test server listening on a socket in a fresh directory.
    func withSocketServer(_ body: (BrickTestServer, String) async throws -> Void) async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/api.sock"
            let server = try await BrickTestServer.start(unixSocketPath: path)
            do {
                try await body(server, path)
                await server.shutdown()
            } catch {
                await server.shutdown()
                throw error
            }
        }
    }

    func transport(socket path: String) -> CurlTransport {
        var configuration = CurlTransport.Configuration()
        configuration.unixSocketPath = path
        return CurlTransport(configuration: configuration)
    }

    @Test("requests go through the socket, keep its connection alive, and carry the URL's host")
    func throughSocket() async throws {
        try await withSocketServer { server, path in
            let transport = transport(socket: path)
            var echoes: [[String: Any]] = []
            for index in 0..<3 {
                let response = try await transport.send(try get("http://localhost/anything?n=\(index)"))
                echoes.append(try json(response.body))
            }
            let posted = try await transport.send(
                try TransportRequest(method: .post, url: "http://localhost/post", body: .data(Data("payload".utf8)))
            )
            let postEcho = try json(posted.body)
            #expect(echoes.map { ($0["args"] as? [String: Any])?["n"] as? String } == ["0", "1", "2"])
            #expect(server.requests.first?.header("Host") == "localhost")
            #expect(postEcho["data"] as? String == "payload")
            #expect(server.requestCount == 4)
            // Three GETs on one connection; the POST (not idempotent) gets a fresh one.
            #expect(server.connectionCount == 2)
        }
    }

    @Test("a socket nobody listens on fails as cannotConnect, before any request byte")
    func missingSocket() async throws {
        try await withTemporaryDirectory { directory in
            let transport = transport(socket: directory + "/nobody.sock")
            let request = try get("http://localhost/anything")
            var failure: TransportError?
            do throws(TransportError) {
                _ = try await transport.send(request)
            } catch {
                failure = error
            }
            #expect(failure?.kind == .cannotConnect)
            #expect(failure?.requestBytesSent == false)
        }
    }

    @Test("an endpoint reaches a daemon through a session configured with its socket")
    func endpoint() async throws {
        try await withSocketServer { server, path in
            var configuration = Session.Configuration()
            configuration.transport.unixSocketPath = path
            let info = try await DaemonInfo(session: Session(configuration: configuration)).value
            #expect(info["method"].string == "GET")
            #expect(server.requests(path: "/anything/info").count == 1)
        }
    }
}
