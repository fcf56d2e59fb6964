import BrickMetrics
import BrickTestSupport
import BrickRequest
import BrickTestServer
import Foundation
import MetricsTestKit
import Testing

@Suite("Connections per destination: open and idle, read from the transport and recorded", .timeLimit(.minutes(3)))
struct ConnectionMetricsTests {
    @Test("four requests in flight hold four connections; once answered, the four are idle; the gauges say so")
    func openAndIdle() async throws {
        let server = try await BrickTestServer.start()
        defer { server.shutdown() }
        let transport = CurlTransport()
        let session = Session(transport: transport)
        let port = server.port
        func counts() async -> CurlTransport.HostConnections? {
            await transport.connectionCounts().first { $0.host == "127.0.0.1" && $0.port == port }
        }
        #expect(await counts() == nil)
        // Held 15 s by the server: still in flight when counted, however loaded the machine (5 s
        // was not, in a whole-suite run on two busy cores).
        let requests = (0..<4).map { _ in
            Task { try await Traced(server.baseURL + "/delay/15", session: session, retries: 0).value }
        }
        await eventually { server.requests(path: "/delay/15").count == 4 }
        let busy = try #require(await counts())
        #expect(busy.open == 4 && busy.idle == 0)
        for request in requests { _ = try await request.value }
        await eventually { await counts()?.idle == 4 }
        #expect(await counts()?.open == 4)

        let metrics = TestMetrics()
        let recorder = Task {
            await ConnectionMetrics(session: session, sampleInterval: .milliseconds(10), factory: metrics).run()
        }
        let dimensions = [("server.address", "127.0.0.1"), ("server.port", String(port))]
        await eventually {
            (try? metrics.expectGauge("brick.client.connections.idle", dimensions).lastValue) == 4
                && (try? metrics.expectGauge("brick.client.connections.open", dimensions).lastValue) == 4
        }
        recorder.cancel()
        await recorder.childValue
    }
}
