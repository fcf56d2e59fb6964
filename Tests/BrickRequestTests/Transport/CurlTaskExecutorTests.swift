@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// A GET brick on a session of the test's own, for running through the transport's executor.
final class ExecutorEcho: Component, GETRequestType, NonAutoRetryType, ValidatedResponseType, JSONResponseType {
    let urlString: String
    let session: Session
    init(url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

@Suite("CurlTransport.taskExecutor", .timeLimit(.minutes(2)))
struct CurlTaskExecutorTests {
    @Test("a task that prefers the executor resumes on the thread where completions run")
    func resumesOnDriverThread() async throws {
        try await withServer { server in
            // Long enough that a preempted task never makes the I/O move to the standby thread.
            let transport = curlTransport(stallLimit: .seconds(2))
            let request = try get(server.baseURL + "/bytes/8")
            _ = try await transport.send(request)
            let driverThread = await completionThread(of: transport, request: request)
            let threads = try await Task(executorPreference: transport.taskExecutor) {
                var seen: [UInt] = [currentThreadID()]
                for _ in 0..<20 {
                    let response = try await transport.send(request)
                    #expect(response.status == .ok)
                    seen.append(currentThreadID())
                }
                return seen
            }.value
            #expect(driverThread != 0)
            #expect(threads.allSatisfy { $0 == driverThread })
            #expect(server.requestCount == 22)
        }
    }

    @Test("a session offers its transport's executor; bricks awaited there resume on the driver thread")
    func sessionPreferredExecutor() async throws {
        try await withServer { server in
            let transport = curlTransport(stallLimit: .seconds(2))
            let session = Session(transport: transport)
            let executor = try #require(session.preferredTaskExecutor)
            #expect(executor === transport.taskExecutor)
            #expect(Session(transport: StubTransport()).preferredTaskExecutor == nil)
            let driverThread = await completionThread(of: transport, request: try get(server.baseURL + "/bytes/8"))
            let url = server.baseURL + "/anything"
            let threads = try await Task(executorPreference: session.preferredTaskExecutor) {
                var seen: [UInt] = []
                for _ in 0..<10 {
                    let echo = try await ExecutorEcho(url: url, session: session).value
                    #expect(echo["method"].string == "GET")
                    seen.append(currentThreadID())
                }
                return seen
            }.value
            #expect(threads.allSatisfy { $0 == driverThread })
        }
    }

    @Test("bricks awaited from tasks on the executor run the whole pipeline")
    func bricksThroughExecutor() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let session = Session(transport: transport)
            let url = server.baseURL + "/anything"
            let methods = try await withThrowingTaskGroup(of: [String].self) { group in
                for _ in 0..<8 {
                    group.addTask(executorPreference: transport.taskExecutor) {
                        var methods: [String] = []
                        for _ in 0..<25 {
                            let echo = try await ExecutorEcho(url: url, session: session).value
                            methods.append(echo["method"].string ?? "?")
                        }
                        return methods
                    }
                }
                var all: [String] = []
                for try await methods in group { all += methods }
                return all
            }
            #expect(methods.count == 200)
            #expect(methods.allSatisfy { $0 == "GET" })
            #expect(server.requestCount == 200)
        }
    }

    @Test("cancelling a task on the executor cancels its transfer and frees it")
    func cancellation() async throws {
        try await withServer { server in
            server.script("/stall", [.stall])
            let transport = CurlTransport()
            let session = Session(transport: transport)
            let url = server.baseURL + "/stall"
            let task = Task(executorPreference: transport.taskExecutor) { () -> BrickError? in
                do throws(BrickError) {
                    _ = try await ExecutorEcho(url: url, session: session).value
                    return nil
                } catch {
                    return error
                }
            }
            await eventually { server.requestCount > 0 }
            task.cancel()
            #expect(await task.childValue == .cancelled)
            #expect(transport.activeTransferCount == 0)
        }
    }

    @Test("after the transport shuts down, tasks that prefer its executor still run")
    func outlivesTransport() async throws {
        var transport: CurlTransport? = CurlTransport()
        let executor = try #require(transport?.taskExecutor)
        transport = nil
        let value = await Task(executorPreference: executor) {
            await Task.yield()
            return 42
        }.value
        #expect(value == 42)
    }
}
