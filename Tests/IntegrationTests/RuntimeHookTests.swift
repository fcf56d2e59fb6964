import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// What a transport does to the Swift runtime's process-wide global-enqueue hook, each case in a
/// process of its own (`brick-hook-probe`): the hook is opt-in, installed only into an empty slot,
/// and a hook installed first stays in place and sees every job.
@Suite("The runtime hook is opt-in and never displaces another", .timeLimit(.minutes(2)))
struct RuntimeHookTests {
    static var probePath: String {
        URL(fileURLWithPath: ResourceLimitTests.probePath).deletingLastPathComponent()
            .appendingPathComponent("brick-hook-probe").path
    }

    private func probe(_ mode: String) async throws -> [String: String] {
        let server = try await BrickTestServer.start()
        defer { Task { await server.shutdown() } }
        let output = try await Subprocess.run("'\(Self.probePath)' \(mode) '\(server.baseURL)/bytes/16'")
        #expect(server.requestCount == 20, "\(output)")
        return ResourceLimitTests.fields(output)
    }

    @Test("by default no hook is installed and awaiting tasks resume on the global executor")
    func offByDefault() async throws {
        let result = try await probe("default")
        #expect(result["slot"] == "empty")
        #expect(result["capture"] == "false")
        #expect(result["on_driver"] == "0")
    }

    @Test("asked for, the hook is installed into the empty slot and tasks go on on the driver")
    func optIn() async throws {
        let result = try await probe("opt-in")
        #expect(result["slot"] == "ours")
        #expect(result["capture"] == "true")
        // A continuation resumed before its task got to suspend is not caught (more often on a
        // loaded machine): most are.
        #expect(Int(result["on_driver"] ?? "") ?? 0 >= 12, "\(result)")
    }

    @Test("a hook installed first is neither replaced nor bypassed: the option then does nothing")
    func anotherHookFirst() async throws {
        let result = try await probe("other-first")
        #expect(result["slot"] == "other")
        #expect(result["capture"] == "false")
        #expect(result["on_driver"] == "0")
        // The resumed tasks went through the other hook (all but those resumed before they
        // suspended, which need no enqueue).
        #expect(Int(result["other_jobs"] ?? "") ?? 0 >= 10, "\(result)")
    }
}
