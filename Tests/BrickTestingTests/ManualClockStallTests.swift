import BrickRequest
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// A GET whose failures are retried (the default configuration), on the given session.
final class RetriedGet: Component, GETRequestType, DataResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/users" }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

@Suite("ManualClock says so when nobody advances it", .timeLimit(.minutes(3)))
struct ManualClockStallTests {
    @Test("a retry waiting on a clock nobody advances is reported with what waits and why")
    func reportsAStall() async throws {
        let reports = Lock<[String]>([])
        let clock = ManualClock(stallReport: .milliseconds(50)) { message in reports.withLock { $0.append(message) } }
        let stub = StubTransport()
        stub.stub(.get, "/users", .status(.serviceUnavailable), .json("{}"))
        let session = Session.testing(stub, clock: clock)
        let call = Task { try await RetriedGet(session: session).value }
        await eventually { !reports.withLock { $0.isEmpty } }
        let report = try #require(reports.withLock { $0.first })
        #expect(report.contains("nobody advanced it"))
        #expect(report.contains("sleep until +5.0 seconds"))
        clock.advance(by: .seconds(5))
        #expect(try await call.childValue == Data("{}".utf8))
    }
}

@Suite("ManualClock: a sleep cancelled before it begins ends at once", .timeLimit(.minutes(3)))
struct ManualClockCancellationTests {
    final class Ended: Sendable {
        let count = Atomic(0)
    }

    @Test("100 sleeps whose tasks are cancelled as they start all end with CancellationError, none waits for an advance")
    func cancelledAsItStarts() async throws {
        let clock = ManualClock()
        let ended = Ended()
        var tasks: [Task<Void, Never>] = []
        for _ in 0..<100 {
            let task = Task {
                do {
                    try await clock.sleep(for: .seconds(3600))
                } catch is CancellationError {
                    ended.count.add(1, ordering: .relaxed)
                } catch {}
            }
            // Cancelled before (or while) the sleep registers: before the fix, `onCancel` found no
            // waiter yet and the sleep then waited for an advance that never came.
            task.cancel()
            tasks.append(task)
        }
        await eventually { ended.count.load(ordering: .relaxed) == 100 }
        #expect(ended.count.load(ordering: .relaxed) == 100)
        #expect(clock.waiterCount == 0)
        // Awaited only when all ended: a sleep that never ends must fail the test, not wedge the run.
        if ended.count.load(ordering: .relaxed) == 100 { for task in tasks { await task.value } }
    }
}
