import BrickOfflineTestSupport
import BrickTestSupport
import Foundation
import Testing

/// The private PostgreSQL server of the test fixture goes with the process that started it, however
/// that process ends: a test run killed mid-suite (a wedged CI step, a developer's Ctrl-\) leaves no
/// server running and no data directory behind.
@Suite("The PostgreSQL fixture leaves nothing behind", .timeLimit(.minutes(2)))
struct FixtureCleanupTests {
    @Test("an owner killed with SIGKILL (and not yet reaped: a zombie) takes its server and directory with it")
    func ownerKilled() async throws {
        let directory = NSTemporaryDirectory() + "brick-postgres-owner-" + UUID().uuidString
        let started = directory + ".started"
        defer { try? FileManager.default.removeItem(atPath: started) }
        // A stand-in for a test process: it starts a fixture server owned by itself, says so, and
        // waits to be killed (`exec` keeps its PID, the owner the watchdog watches).
        let owner = try Subprocess.spawn(
            "'\(PostgresFixture.script)' start '\(directory)' $$ > '\(started)' 2>&1 && echo ok >> '\(started)'; exec sleep 600"
        )
        await eventually(within: .seconds(90)) {
            ((try? String(contentsOfFile: started, encoding: .utf8)) ?? "").hasSuffix("ok\n")
        }
        let output = (try? String(contentsOfFile: started, encoding: .utf8)) ?? ""
        let port = try #require(
            output.split(whereSeparator: { $0 == " " || $0 == "\n" }).first { $0.hasPrefix("PGPORT=") }
                .flatMap { Int($0.dropFirst("PGPORT=".count)) },
            "the fixture did not start: \(output)"
        )
        #expect(canConnect(port), "the server is up before the kill")
        #expect(FileManager.default.fileExists(atPath: directory + "/data"))

        kill(owner, SIGKILL)
        // Not reaped until the end: `kill -0` would still find the zombie; the watchdog must not.
        await eventually(within: .seconds(60)) { !FileManager.default.fileExists(atPath: directory) }
        #expect(!FileManager.default.fileExists(atPath: directory), "the data directory outlived its owner")
        #expect(!canConnect(port), "the server outlived its owner")
        #expect(await Subprocess.exitStatus(of: owner) == 128 + SIGKILL)
    }
}
