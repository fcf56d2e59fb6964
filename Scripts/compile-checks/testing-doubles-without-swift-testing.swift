// expect: compiles
// The test doubles in a file that imports only BrickTesting and XCTest (an XCTest target, a sample
// app, a preview): no default argument needs a macro of Swift Testing.
import BrickTesting
import XCTest

final class StubbedTests: XCTestCase {
    func testStubAndClock() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users", .json(#"{"name":"Ada"}"#))
        let clock = ManualClock()
        let timed = StubTransport(clock: clock)
        _ = (stub.requests, timed.requests, clock.now)
        let answer = try await withReplay(path: "/tmp/never-read.har", mode: .record) { 42 }
        XCTAssertEqual(answer, 42)
    }
}
