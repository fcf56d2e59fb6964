@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing

/// Runs `count` requests of `session` one after another, each started by the previous handler;
/// returns the thread each handler ran on.
private func chainedHandlerThreads(_ url: String, _ session: Session, count: Int) async -> [UInt] {
    final class Chain: Sendable {
        let threads = Lock<[UInt]>([])
        let url: String
        let session: Session
        let count: Int
        let done: @Sendable () -> Void
        init(url: String, session: Session, count: Int, done: @escaping @Sendable () -> Void) {
            (self.url, self.session, self.count, self.done) = (url, session, count, done)
        }
        func next() {
            SessionGet(url: url, session: session).response { [self] response in
                #expect(response.error == nil)
                let finished = threads.withLock {
                    $0.append(currentThreadID())
                    return $0.count == count
                }
                finished ? done() : next()
            }.resume()
        }
    }
    return await withCheckedContinuation { (continuation: CheckedContinuation<[UInt], Never>) in
        let chain = Lock<Chain?>(nil)
        let created = Chain(url: url, session: session, count: count) {
            continuation.resume(returning: chain.withLock { $0?.threads.withLock { $0 } ?? [] })
            chain.withLock { $0 = nil }
        }
        chain.withLock { $0 = created }
        created.next()
    }
}

@Suite("Work on the transport's thread: handler drains, executor jobs, stall takeover", .timeLimit(.minutes(2)))
struct StallTakeoverTests {
    /// Where the handlers of `count` chained requests ran, and where the transport's completions
    /// run, on a transport with `stallLimit`.
    private func handlerThreads(
        stallLimit: Duration,
        count: Int,
        server: BrickTestServer
    ) async throws -> (handlers: [UInt], transport: UInt) {
        let transport = curlTransport(stallLimit: stallLimit)
        let session = Session(transport: transport)
        let url = server.baseURL + "/bytes/8"
        let driver = await completionThread(of: transport, request: try get(url))
        return (await chainedHandlerThreads(url, session, count: count), driver)
    }

    @Test("the default serial queue runs handlers on the transport's thread, with no hop")
    func handlersRunOnTransportThread() async throws {
        try await withServer { server in
            // Long enough that a preempted handler never triggers a takeover in this test.
            let threads = try await handlerThreads(stallLimit: .seconds(2), count: 20, server: server)
            #expect(threads.handlers.count == 20)
            #expect(threads.handlers.allSatisfy { $0 == threads.transport })
            #expect(server.requestCount == 21)
        }
    }

    @Test("with stallLimit zero, handlers hop to the queue's own thread")
    func zeroLimitHops() async throws {
        try await withServer { server in
            let threads = try await handlerThreads(stallLimit: .zero, count: 5, server: server)
            #expect(threads.handlers.count == 5)
            #expect(threads.handlers.allSatisfy { $0 != threads.transport })
        }
    }

    @Test("a handler that blocks does not stall the transport: another request completes meanwhile")
    func blockingHandlerDoesNotStallIO() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let session = Session(transport: transport)
            let request = try get(server.baseURL + "/bytes/16")
            let url = server.baseURL + "/bytes/8"
            // The handler waits for a request that only the transport's I/O can complete. Without a
            // takeover, the I/O would be stuck behind the handler and the wait would time out.
            let waited = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                SessionGet(url: url, session: session).response { response in
                    #expect(response.error == nil)
                    let other = DispatchSemaphore(value: 0)
                    _ = transport.start(request) { result in
                        #expect((try? result.get())?.body?.count == 16)
                        other.signal()
                    }
                    continuation.resume(returning: other.wait(timeout: .now() + 60) == .success)
                }.resume()
            }
            #expect(waited)
            #expect(transport.stallTakeoverCount == 1)
            #expect(server.requestCount == 2)
        }
    }

    @Test("handlers stay one at a time and each runs once while slow ones move the I/O between threads")
    func handlersStaySerialAcrossTakeovers() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let session = Session(transport: transport)
            let url = server.baseURL + "/bytes/32"
            let inside = Atomic<Int>(0)
            let overlaps = Atomic<Int>(0)
            let delivered = Atomic<Int>(0)
            let total = 60
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                for index in 0..<total {
                    SessionGet(url: url, session: session).response { response in
                        #expect(response.value?.count == 32)
                        if inside.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
                            overlaps.add(1, ordering: .relaxed)
                        }
                        // Every fifth handler outlasts two looks of the standby (5 ms apart by default).
                        if index % 5 == 0 { usleep(12_000) }
                        inside.subtract(1, ordering: .sequentiallyConsistent)
                        if delivered.add(1, ordering: .sequentiallyConsistent).newValue == total {
                            continuation.resume()
                        }
                    }.resume()
                }
            }
            #expect(transport.stallTakeoverCount > 0)
            #expect(overlaps.load(ordering: .relaxed) == 0)
            #expect(delivered.load(ordering: .relaxed) == total)
            #expect(server.requestCount == total)
            // The transport still works after the I/O moved between threads.
            let after = try await transport.send(try get(url))
            #expect(after.body?.count == 32)
        }
    }

    @Test("a task on taskExecutor that blocks does not stall the transport")
    func blockingExecutorTaskDoesNotStallIO() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let request = try get(server.baseURL + "/bytes/8")
            _ = try await transport.send(request)
            let started = DispatchSemaphore(value: 0)
            let answered = DispatchSemaphore(value: 0)
            let blocked = Task(executorPreference: transport.taskExecutor) { () -> Bool in
                started.signal()
                // Blocks the thread it runs on until the transport answers another request.
                return answered.wait(timeout: .now() + 60) == .success
            }
            #expect(await signalled(started))
            _ = transport.start(request) { result in
                #expect((try? result.get())?.status == .ok)
                answered.signal()
            }
            #expect(await blocked.childValue)
            #expect(transport.stallTakeoverCount == 1)
            // Tasks on the executor keep working after the takeover.
            let status = try await Task(executorPreference: transport.taskExecutor) {
                try await transport.send(request).status
            }.value
            #expect(status == .ok)
        }
    }
}

extension StallTakeoverTests {
    @Test("work queued behind a long one runs at once on the new leader, and the transport still shuts down cleanly")
    func workAfterShutdown() async throws {
        try await withServer { server in
            var transport: CurlTransport? = CurlTransport()
            weak let weakTransport = transport
            let release = DispatchSemaphore(value: 0)
            let laterRan = DispatchSemaphore(value: 0)
            let scheduled = DispatchSemaphore(value: 0)
            _ = transport?.start(try get(server.baseURL + "/bytes/8")) { _ in
                guard let transport = weakTransport else { return }
                // The first piece of work blocks until released; the second is queued behind it.
                #expect(transport.scheduleOnTransportThread { release.wait() })
                #expect(transport.scheduleOnTransportThread { laterRan.signal() })
                scheduled.signal()
            }
            #expect(await signalled(scheduled))
            // The standby takes the I/O over, and with it the work not started yet: the second
            // piece runs while the first still blocks.
            #expect(await signalled(laterRan))
            #expect((transport?.stallTakeoverCount ?? 0) >= 1)
            // The transport goes away while the first piece still blocks; then it returns.
            transport = nil
            release.signal()
            await eventually { weakTransport == nil }
        }
    }
}

@Suite("Stall takeovers under load", .timeLimit(.minutes(2)))
struct StallTakeoverStressTests {
    @Test(
        "many requests whose handlers and tasks block at random: each handler once, one at a time; nothing left behind"
    )
    func randomBlockingUnderLoad() async throws {
        try await withServer { server in
            let transport = curlTransport(stallLimit: .microseconds(500))
            let session = Session(transport: transport)
            let url = server.baseURL + "/bytes/64"
            let inside = Atomic<Int>(0)
            let overlaps = Atomic<Int>(0)
            let calls = Lock<[Int: Int]>([:])
            let total = 300
            // Handlers through the session's default queue: a third of them block for 1–3 ms.
            async let handlers: Void = withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                for index in 0..<total {
                    SessionGet(url: url, session: session).response { response in
                        #expect(response.value?.count == 64)
                        if inside.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
                            overlaps.add(1, ordering: .relaxed)
                        }
                        if index % 3 == 0 { usleep(UInt32(1_000 + (index % 5) * 500)) }
                        inside.subtract(1, ordering: .sequentiallyConsistent)
                        let delivered = calls.withLock {
                            $0[index, default: 0] += 1
                            return $0.count
                        }
                        if delivered == total && calls.withLock({ $0[index] }) == 1 { continuation.resume() }
                    }.resume()
                }
            }
            // Meanwhile, tasks on the transport's executor, some of which block their thread too.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for worker in 0..<8 {
                    group.addTask(executorPreference: transport.taskExecutor) {
                        var ok = 0
                        for step in 0..<20 {
                            if (worker + step) % 4 == 0 { usleep(1_500) }
                            if try await transport.send(try get(url)).status == .ok { ok += 1 }
                        }
                        return ok
                    }
                }
                return try await group.reduce(0, +)
            }
            await handlers
            #expect(statuses == 160)
            #expect(overlaps.load(ordering: .relaxed) == 0)
            #expect(calls.withLock { $0.count == total && $0.values.allSatisfy { $0 == 1 } })
            #expect(transport.stallTakeoverCount > 0)
            #expect(server.requestCount == total + 160)
            #expect(transport.activeTransferCount == 0)
        }
    }
}
