import BrickRequest
import Foundation
import Testing

@Suite("Threads BrickRequest starts are named (top -H, ps -L, debuggers)", .timeLimit(.minutes(2)))
struct ThreadNameTests {
    @Test("the transport's driver thread is brick-curl")
    func driverThread() async throws {
        let transport = CurlTransport()
        // Completions run on the driver thread; port 1 refuses at once, no server needed.
        let request = try get("http://127.0.0.1:1/")
        let name = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            _ = transport.start(request) { _ in continuation.resume(returning: currentThreadName()) }
        }
        #expect(name == "brick-curl")
        #expect(currentThreadName() != "brick-curl")
    }

    @Test("the netlink monitor's thread is brick-netlink")
    func netlinkThread() async throws {
        let reachability = try NetlinkReachability()
        // The thread names itself as it starts: look until it has (or give up after 10 s).
        var found = false
        for _ in 0..<1000 where !found {
            found = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").contains { task in
                (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) == "brick-netlink\n"
            }
            if !found { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(found)
        withExtendedLifetime(reachability) {}
    }
}
