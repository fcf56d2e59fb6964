@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing

/// Records where an actor-isolated caller goes on after `value`.
private actor IsolatedCaller {
    func fetch(_ url: String, session: Session) async throws -> (name: String, count: Int) {
        let body = try await SessionGet(url: url, session: session).value
        assertIsolated()
        return (currentThreadName(), body.count)
    }
}

/// A transport that asks for awaiting tasks to go on at its safe point (opt-in), watched with `stallLimit`.
private func capturingTransport(stallLimit: Duration) -> CurlTransport {
    let transport = curlTransport {
        $0.stallLimit = stallLimit
        $0.resumesTasksAtSafePoint = true
    }
    #expect(transport.capturesResumedTasks, "the runtime hook could not be installed in the test process")
    return transport
}

@Suite("Awaiting tasks go on at the transport's safe point (opt-in)", .timeLimit(.minutes(2)))
struct ResumedTaskTests {
    /// The names of the threads a task with no executor preference runs on after each of `count`
    /// awaited responses.
    private func threadsAfterValue(count: Int, session: Session, url: String) async throws -> [String] {
        try await Task.detached {
            var names: [String] = []
            for _ in 0..<count {
                let body = try await SessionGet(url: url, session: session).value
                #expect(body.count == 16)
                names.append(currentThreadName())
            }
            return names
        }.value
    }

    @Test("a task with no executor preference goes on on the driver's thread after value; off when configured")
    func ordinaryTaskRunsAtSafePoint() async throws {
        try await withServer { server in
            let url = server.baseURL + "/bytes/16"
            // A long stall limit: a preempted test process never moves the I/O to the standby.
            let session = Session(transport: capturingTransport(stallLimit: .seconds(2)))
            let names = try await threadsAfterValue(count: 20, session: session, url: url)
            // A continuation resumed before its task got to suspend is not caught (more often on a
            // loaded machine: CI once saw 18 of 20 with the whole suite running): most are, where with
            // the hook off below none is.
            #expect(names.filter { $0 == "brick-curl" }.count >= 12, "\(names)")

            let off = Session(
                transport: curlTransport {
                    $0.stallLimit = .seconds(2)
                    $0.resumesTasksAtSafePoint = false
                }
            )
            #expect(try await threadsAfterValue(count: 20, session: off, url: url).allSatisfy { $0 != "brick-curl" })
            // The default: off.
            let byDefault = Session(transport: CurlTransport())
            #expect(!(byDefault.transport as! CurlTransport).capturesResumedTasks)
            #expect(try await threadsAfterValue(count: 20, session: byDefault, url: url).allSatisfy { $0 != "brick-curl" })
            let unwatched = Session(
                transport: curlTransport {
                    $0.stallLimit = .zero
                    $0.resumesTasksAtSafePoint = true
                }
            )
            #expect(
                try await threadsAfterValue(count: 20, session: unwatched, url: url).allSatisfy { $0 != "brick-curl" }
            )
            #expect(server.requestCount == 80)
        }
    }

    @Test("Transport.send on a CurlTransport: the task goes on on the driver's thread too")
    func transportSendRunsAtSafePoint() async throws {
        try await withServer { server in
            let transport = capturingTransport(stallLimit: .seconds(2))
            let request = try get(server.baseURL + "/bytes/16")
            let names = try await Task.detached {
                var names: [String] = []
                for _ in 0..<20 {
                    let response = try await transport.send(request)
                    #expect(response.body?.count == 16)
                    names.append(currentThreadName())
                }
                return names
            }.value
            // A continuation resumed before its task got to suspend is not caught (more often on a
            // loaded machine, with the whole suite running): most are.
            #expect(names.filter { $0 == "brick-curl" }.count >= 12, "\(names)")
        }
    }

    @Test("actor-isolated callers get their result on their actor")
    @MainActor
    func isolatedCallersStayIsolated() async throws {
        let server = try await BrickTestServer.start()
        let url = server.baseURL + "/bytes/16"
        let session = Session(transport: capturingTransport(stallLimit: .seconds(2)))
        for _ in 0..<5 {
            let body = try await SessionGet(url: url, session: session).value
            MainActor.assertIsolated()
            #expect(body.count == 16)
            #expect(currentThreadName() != "brick-curl")
        }
        let caller = IsolatedCaller()
        for _ in 0..<5 {
            let (name, count) = try await caller.fetch(url, session: session)
            #expect(count == 16)
            #expect(name != "brick-curl")
        }
        await server.shutdown()
    }

    @Test("a task that blocks after value does not stall the transport")
    func blockingAfterValueDoesNotStallIO() async throws {
        try await withServer { server in
            let transport = capturingTransport(stallLimit: .milliseconds(5))
            let session = Session(transport: transport)
            let url = server.baseURL + "/bytes/16"
            let request = try get(url)
            // One round: a task blocks right after `value` until the transport answers another
            // request. A continuation resumed before its task got to suspend is not caught (the
            // task goes on on a pool thread): such a round does not count and blocks nothing — a
            // pool thread blocked for seconds (two on a 2-core machine) stalled every other suite
            // of a whole run — and rounds repeat until one is caught.
            func round() async throws -> (name: String, answered: Bool, takeovers: Int) {
                let started = DispatchSemaphore(value: 0)
                let answered = DispatchSemaphore(value: 0)
                let before = transport.stallTakeoverCount
                let blocked = Task.detached { () -> (String, Bool) in
                    _ = try await SessionGet(url: url, session: session).value
                    let name = currentThreadName()
                    started.signal()
                    guard name == "brick-curl" else { return (name, true) }
                    return (name, answered.wait(timeout: .now() + 60) == .success)
                }
                #expect(await signalled(started))
                _ = transport.start(request) { result in
                    #expect((try? result.get())?.status == .ok)
                    answered.signal()
                }
                let (name, wasAnswered) = try await blocked.childValue
                return (name, wasAnswered, transport.stallTakeoverCount - before)
            }
            var caught: (name: String, answered: Bool, takeovers: Int)?
            for _ in 0..<10 where caught == nil {
                let result = try await round()
                #expect(result.answered)
                if result.name == "brick-curl" { caught = result }
            }
            #expect(caught?.name == "brick-curl")
            #expect(caught?.answered == true)
            #expect(caught?.takeovers == 1)
            // Awaiting tasks keep working after the takeover.
            #expect(try await threadsAfterValue(count: 3, session: session, url: url).count == 3)
        }
    }

    @Test("cancelling a task whose code runs at the safe point cancels the request it sent from there")
    func cancellationAfterResumption() async throws {
        try await withServer { server in
            let session = Session(transport: capturingTransport(stallLimit: .seconds(2)))
            let fast = server.baseURL + "/bytes/16"
            // Never answered: only the cancellation can end it (a slow answer could arrive first
            // when a loaded machine starves this test for seconds).
            server.script("/stall", [.stall])
            let slow = server.baseURL + "/stall"
            let sentSlow = DispatchSemaphore(value: 0)
            let task = Task.detached { () -> BrickError? in
                _ = try await SessionGet(url: fast, session: session).value
                sentSlow.signal()
                do {
                    _ = try await SessionGet(url: slow, session: session).value
                    return nil
                } catch let error as BrickError {
                    return error
                }
            }
            #expect(await signalled(sentSlow))
            // Let the slow request reach the server, then cancel the task.
            await eventually { server.requests(path: "/stall").count == 1 }
            task.cancel()
            let error = try await task.childValue
            #expect(error?.code == .cancelled)
        }
    }

    @Test("many ordinary tasks that block at random after value: every request answered, the I/O moves, nothing left behind")
    func randomBlockingUnderLoad() async throws {
        try await withServer { server in
            let transport = capturingTransport(stallLimit: .microseconds(500))
            let session = Session(transport: transport)
            let url = server.baseURL + "/bytes/64"
            let (ok, onDriver) = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                for worker in 0..<8 {
                    group.addTask {
                        var ok = 0
                        var onDriver = 0
                        for step in 0..<25 {
                            let body = try await SessionGet(url: url, session: session).value
                            if body.count == 64 { ok += 1 }
                            if currentThreadName() == "brick-curl" { onDriver += 1 }
                            // Every fourth step blocks the thread it goes on on for 1.5 ms.
                            if (worker + step) % 4 == 0 { usleep(1_500) }
                        }
                        return (ok, onDriver)
                    }
                }
                return try await group.reduce((0, 0)) { ($0.0 + $1.0, $0.1 + $1.1) }
            }
            #expect(ok == 200)
            #expect(onDriver > 100, "only \(onDriver) of 200 went on on the driver's thread")
            #expect(transport.stallTakeoverCount > 0)
            #expect(server.requestCount == 200)
            #expect(transport.activeTransferCount == 0)
        }
    }
}
