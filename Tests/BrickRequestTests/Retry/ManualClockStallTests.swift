import BrickRequest
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

@Suite("ManualClock says so when nobody advances it", .timeLimit(.minutes(1)))
struct ManualClockStallTests {
    @Test("a retry waiting on a clock nobody advances is reported with what waits and why")
    func reportsAStall() async throws {
        let reports = Lock<[String]>([])
        let clock = ManualClock(stallReport: .milliseconds(50)) { message in reports.withLock { $0.append(message) } }
        let stub = StubTransport()
        stub.stub(.get, "/users", .status(.serviceUnavailable), .json("{}"))
        let session = Session.testing(stub, clock: clock)
        let call = Task { try await Flaky("https://api.example.com/users", session: session, retry: AutoRetryConfiguration()).value }
        await eventually { !reports.withLock { $0.isEmpty } }
        let report = try #require(reports.withLock { $0.first })
        #expect(report.contains("nobody advanced it"))
        #expect(report.contains("sleep until +5.0 seconds"))
        clock.advance(by: .seconds(5))
        #expect(try await call.childValue == Data("{}".utf8))
    }
}
