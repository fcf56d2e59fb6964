import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Synchronization
import Testing

@Suite("CurlTransport: errors, timeouts, cancellation", .timeLimit(.minutes(2)))
struct CurlTransportErrorTests {
    @Test("connection refused: cannotConnect, nothing sent")
    func refused() async throws {
        let server = try await BrickTestServer.start()
        let port = server.port
        await server.shutdown()
        let result = await CurlTransport().result(try get("http://127.0.0.1:\(port)/get"))
        let error = try #require(result.failure)
        #expect(error.kind == .cannotConnect)
        #expect(error.curlCode == 7)
        #expect(error.osErrno == ECONNREFUSED)
        #expect(error.requestBytesSent == false)
    }

    @Test("reset before the response: connectionReset, request bytes were sent")
    func resetAtStart() async throws {
        try await withServer { server in
            server.script("/x", [.resetBeforeResponse])
            let result = await CurlTransport().result(try get(server.baseURL + "/x"))
            let error = try #require(result.failure)
            #expect(error.kind == .connectionReset)
            #expect(error.requestBytesSent == true)
        }
    }

    @Test("reset in the middle of the body: connectionReset")
    func resetMidBody() async throws {
        try await withServer { server in
            server.script("/x", [.resetMidBody(totalBytes: 100_000, sentBytes: 50_000)])
            let result = await CurlTransport().result(try get(server.baseURL + "/x"))
            #expect(result.failure?.kind == .connectionReset)
        }
    }

    @Test("closed without a reply: connectionReset")
    func closedWithoutReply() async throws {
        try await withServer { server in
            server.script("/x", [.closeBeforeResponse])
            let result = await CurlTransport().result(try get(server.baseURL + "/x"))
            #expect(result.failure?.kind == .connectionReset)
            #expect(result.failure?.curlCode == 52)
        }
    }

    @Test("whole-request timeout")
    func requestTimeout() async throws {
        try await withServer { server in
            server.script("/slow", [.stall])
            let options = TransportRequest.Options(timeout: .milliseconds(300))
            let result = await CurlTransport().result(try get(server.baseURL + "/slow", options: options))
            #expect(result.failure?.kind == .timedOut)
            #expect(result.failure?.curlCode == 28)
            // The server accepted and never answered: the error names the limit that expired.
            #expect(result.failure?.message.hasPrefix("request timeout: ") == true, "\(String(describing: result.failure))")
        }
    }

    @Test("idle timeout: a transfer that stops moving fails")
    func idleTimeout() async throws {
        try await withServer { server in
            var configuration = CurlTransport.Configuration()
            configuration.idleTimeout = .seconds(1)
            server.script("/stall", [.stall])
            let result = await CurlTransport(configuration: configuration).result(try get(server.baseURL + "/stall"))
            #expect(result.failure?.kind == .timedOut)
            #expect(result.failure?.message.contains("idle timeout") == true)
            #expect(result.failure?.requestBytesSent == true)
        }
    }

    @Test("idle timeout: a body that stalls midway fails; a slow but steady one does not")
    func idleTimeoutMidBody() async throws {
        try await withServer { server in
            let transport = curlTransport { $0.idleTimeout = .milliseconds(600) }
            // One byte every 100 ms: slow, never idle for 600 ms.
            let steady = await transport.result(try get(server.baseURL + "/drip?numbytes=8&duration=0.8"))
            #expect((try? steady.get())?.body == Data(repeating: UInt8(ascii: "*"), count: 8))
            // Headers at once, then a byte every two seconds: idle after the headers.
            let stalled = await transport.result(try get(server.baseURL + "/drip?numbytes=2&duration=4"))
            #expect(stalled.failure?.kind == .timedOut)
            #expect(stalled.failure?.message.contains("idle timeout") == true)
        }
    }

    @Test("idle timeout with idleMinimumBytes: a body trickled at a byte a second fails; the default lets a slow steady body finish")
    func trickle() async throws {
        try await withServer { server in
            // About a byte a second for a minute: never idle by the default rule.
            let trickle = try get(server.baseURL + "/drip?numbytes=60&duration=60")
            let strict = curlTransport {
                $0.idleTimeout = .milliseconds(1500)
                $0.idleMinimumBytes = 4
            }
            let cut = await strict.result(trickle)
            #expect(cut.failure?.kind == .timedOut)
            #expect(cut.failure?.message.contains("fewer than 4 bytes moved in 1.5 s") == true, "\(String(describing: cut.failure))")
            #expect(cut.failure?.requestBytesSent == true)
            // A byte every 0.6 s under a 1.5 s idle timeout and the default minimum: it completes.
            let lenient = curlTransport { $0.idleTimeout = .milliseconds(1500) }
            let steady = await lenient.result(try get(server.baseURL + "/drip?numbytes=4&duration=2.4"))
            #expect((try? steady.get())?.body?.count == 4)
        }
    }

    @Test("idle timeout: waiting for a free connection is not idleness")
    func idleTimeoutWhileQueued() async throws {
        try await withServer { server in
            let transport = curlTransport {
                $0.idleTimeout = .milliseconds(500)
                $0.maxConnectionsPerHost = 1
            }
            // The first holds the only connection for about a second, moving a byte every 100 ms;
            // the second waits for it far longer than the idle timeout, then succeeds.
            let dripping = try get(server.baseURL + "/drip?numbytes=10&duration=1")
            let first = Task { await transport.result(dripping) }
            await eventually { !server.requests.isEmpty }
            let queued = await transport.result(try get(server.baseURL + "/get"))
            let slow = await first.childValue
            #expect((try? slow.get())?.body?.count == 10)
            #expect((try? queued.get())?.status == .ok)
            #expect(server.connectionCount == 1)
        }
    }

    @Test("connect timeout: a listener that never accepts")
    func connectTimeout() async throws {
        // A socket that listens with a backlog of 0 and never accepts: once its queue is full, the
        // kernel drops further SYNs and a connect hangs until the client's connect timeout.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
        }
        #expect(listen(listener, 0) == 0)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 {
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) }
            }
            fillers.append(filler)
        }
        var configuration = CurlTransport.Configuration()
        configuration.connectTimeout = .milliseconds(500)
        let result = await CurlTransport(configuration: configuration).result(try get("http://127.0.0.1:\(port)/"))
        #expect(result.failure?.kind == .timedOut)
        #expect(result.failure?.requestBytesSent == false)
        #expect(result.failure?.message.hasPrefix("connect timeout: ") == true, "\(String(describing: result.failure))")
    }

    @Test("cancel delivers cancelled exactly once and frees the handle")
    func cancel() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            server.script("/stall", [.stall])
            let results = ResultsBox()
            let task = transport.start(try get(server.baseURL + "/stall")) { results.add($0) }
            await eventually { server.requestCount > 0 }
            task.cancel()
            task.cancel()
            await results.wait(count: 1)
            #expect(results.all.count == 1)
            #expect(results.all.first?.failure?.kind == .cancelled)
            #expect(transport.activeTransferCount == 0)
            #expect(ProcessProbe.socketDescriptors(connectedTo: server.port) == 0)
        }
    }

    @Test("cancelling the awaiting task cancels the transfer")
    func taskCancellation() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            server.script("/stall", [.stall])
            let request = try get(server.baseURL + "/stall")
            let task = Task { await transport.result(request) }
            await eventually { server.requestCount > 0 }
            task.cancel()
            let result = await task.childValue
            #expect(result.failure?.kind == .cancelled)
            #expect(transport.activeTransferCount == 0)
        }
    }

    @Test("a transport that goes away fails its requests with shutdown")
    func shutdown() async throws {
        try await withServer { server in
            server.script("/stall", [.stall])
            let results = ResultsBox()
            let task: TransportTask
            do {
                let transport = CurlTransport()
                task = transport.start(try get(server.baseURL + "/stall")) { results.add($0) }
                await eventually { server.requestCount > 0 }
            }
            await results.wait(count: 1)
            #expect(results.all.first?.failure?.kind == .shutdown)
            // The task outlives its transport: cancelling it now does nothing, and nothing more is
            // delivered. No driver thread is left to deliver on, so a delivery would have happened
            // within cancel(), on this thread: the count right after it is the proof.
            task.cancel()
            #expect(results.all.count == 1)
        }
    }
}

/// Collects completions from transport callbacks.
final class ResultsBox: Sendable {
    private let results = Lock<[Result<TransportResponse, TransportError>]>([])

    func add(_ result: Result<TransportResponse, TransportError>) {
        results.withLock { $0.append(result) }
    }

    var all: [Result<TransportResponse, TransportError>] { results.withLock { $0 } }

    func wait(count: Int) async {
        await eventually { all.count >= count }
    }
}
