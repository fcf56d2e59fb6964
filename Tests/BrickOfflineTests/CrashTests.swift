import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// Durability against `kill -9`, with real processes: `brick-offline-probe` adds or drains a
/// queue and is killed with SIGKILL at random moments; the test then opens the store itself.
@Suite("Offline queue under kill -9, in processes of their own", .serialized, .timeLimit(.minutes(5)))
struct CrashTests {
    static var probePath: String {
        testProductsDirectory.appendingPathComponent("brick-offline-probe").path
    }

    /// A running probe whose output is read line by line. Spawned with `posix_spawn`
    /// (``Subprocess``), not Foundation's `Process`, whose `run()` crashed (a bad `memmove`) while
    /// other tests of the process held many descriptors.
    final class Probe: Sendable {
        /// The probe's own process (the shell `exec`s it): what `kill` kills.
        let pid: pid_t
        private let received = Received()

        /// What the probe wrote, read by a thread of its own as it comes (a probe never blocks
        /// on a full pipe).
        private final class Received: @unchecked Sendable {  // `lock` guards `data`
            let lock = NSLock()
            var data = Data()
            let ended = DispatchSemaphore(value: 0)
        }

        /// The write end of the probe's standard input, when it reads commands; -1 otherwise.
        private let input: Int32

        /// - Parameters:
        ///   - arguments: The probe's arguments.
        ///   - environment: Variables set for it.
        ///   - takesInput: Whether the probe reads commands (``send(_:)``) on its standard input.
        init(_ arguments: [String], environment: [String: String] = [:], takesInput: Bool = false) throws {
            var descriptors: [Int32] = [0, 0]
            guard pipe(&descriptors) == 0 else { throw Subprocess.Failure(description: "pipe failed") }
            var inputs: [Int32] = [-1, -1]
            if takesInput, pipe(&inputs) != 0 {
                close(descriptors[0])
                close(descriptors[1])
                throw Subprocess.Failure(description: "pipe failed")
            }
            let assignments = environment.sorted { $0.key < $1.key }.map { "\($0.key)='\($0.value)' " }.joined()
            let command = ([CrashTests.probePath] + arguments).map { "'\($0)'" }.joined(separator: " ")
            do {
                pid = try Subprocess.spawn(
                    "\(assignments.isEmpty ? "" : "export \(assignments); ")exec \(command) 2>/dev/null",
                    stdout: descriptors[1],
                    stdin: takesInput ? inputs[0] : nil
                )
            } catch {
                close(descriptors[0])
                close(descriptors[1])
                if takesInput { close(inputs[0]); close(inputs[1]) }
                throw error
            }
            close(descriptors[1])
            if takesInput { close(inputs[0]) }
            input = inputs[1]
            let readEnd = descriptors[0]
            let received = self.received
            Thread.detachNewThread {
                var chunk = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = read(readEnd, &chunk, chunk.count)
                    if count <= 0 { break }
                    received.lock.lock()
                    received.data.append(contentsOf: chunk[0..<count])
                    received.lock.unlock()
                }
                close(readEnd)
                received.ended.signal()
            }
        }

        deinit {
            if input >= 0 { close(input) }
        }

        /// Writes a command line to the probe's standard input.
        func send(_ line: String) {
            let bytes = Array((line + "\n").utf8)
            _ = bytes.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        }

        /// Waits until the probe wrote a line that satisfies `matches` (30 s at most: an issue
        /// then) and returns it.
        @discardableResult
        func line(sourceLocation: SourceLocation = #_sourceLocation, where matches: @escaping (String) -> Bool) async -> String? {
            let found = await poll(within: .seconds(30)) { self.lines().first(where: matches) }
            if found == nil { Issue.record("the probe never wrote the line; it wrote \(lines())", sourceLocation: sourceLocation) }
            return found
        }

        /// Kills the probe with SIGKILL and returns every complete line it wrote.
        func kill() async -> [String] {
            Glibc.kill(pid, SIGKILL)
            return await wait()
        }

        /// Waits for the probe to end (on a thread of its own: the test's threads are the
        /// cooperative pool's, which other tests need meanwhile) and returns its lines.
        func wait() async -> [String] {
            _ = await Subprocess.exitStatus(of: pid)
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                Thread.detachNewThread {
                    self.received.ended.wait()
                    continuation.resume()
                }
            }
            return lines()
        }

        /// Every complete line the probe wrote so far.
        func lines() -> [String] {
            received.lock.lock()
            let text = String(decoding: received.data, as: UTF8.self)
            received.lock.unlock()
            // A line cut off by the kill has no newline: it was not acknowledged in full.
            var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            if !text.hasSuffix("\n") { lines.removeLast() }
            return lines.filter { !$0.isEmpty }
        }
    }

    /// The numbers (bodies) of the entries in a store.
    static func storedNumbers(_ store: SQLiteOfflineStore, queue: String) async throws -> Set<Int> {
        struct Payload: Decodable { var body: Data? }
        let entries = try await store.list(queue: queue)
        return Set(
            entries.compactMap { entry in
                (try? JSONDecoder().decode(Payload.self, from: entry.payload)).flatMap { payload in
                    payload.body.flatMap { Int(String(decoding: $0, as: UTF8.self)) }
                }
            }
        )
    }

    @Test("(a) adds killed at random 20 times: every acknowledged add is on disk, integrity ok each time")
    func addsSurviveKills() async throws {
        try await withDirectory { directory in
            let url = "http://127.0.0.1:\(closedPort())/post"
            var acknowledged = Set<Int>()
            var integrity: [String] = []
            for cycle in 0..<20 {
                let probe = try Probe(["add", directory.path, "sales", url, String(cycle * 1_000_000)])
                try await Task.sleep(for: .milliseconds(Int.random(in: 200...600)))
                let lines = await probe.kill()
                for line in lines where line.hasPrefix("ack ") {
                    if let number = Int(line.dropFirst(4)) { acknowledged.insert(number) }
                }
                let store = try SQLiteOfflineStore(name: "sales", directory: directory)
                integrity.append(try await store.integrityCheck())
                let stored = try await Self.storedNumbers(store, queue: "sales")
                let lost = acknowledged.subtracting(stored)
                #expect(lost.isEmpty, "cycle \(cycle): \(lost.count) acknowledged adds lost")
            }
            #expect(integrity.allSatisfy { $0 == "ok" }, "\(integrity)")
            #expect(acknowledged.count > 100, "only \(acknowledged.count) adds acknowledged")
            print("crash (a): \(acknowledged.count) acknowledged adds over 20 kills, 0 lost")
        }
    }

    @Test("(b) 10,000 entries drain while the drainer is killed 20 times: none lost, duplicates ≤ kills")
    func drainSurvivesKills() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let total = 10_000
                let url = server.baseURL + "/post"
                let filled = try await Probe(["fill", directory.path, "drain", url, String(total)]).wait()
                // The filling process starts delivering as soon as it adds: some may be gone already.
                #expect(filled.last?.hasPrefix("filled ") == true, "\(filled)")
                let sync = ["BRICK_PROBE_SYNC": "normal"]
                var kills = 0
                while kills < 20 {
                    let probe = try Probe(["drain", directory.path, "drain"], environment: sync)
                    try await Task.sleep(for: .milliseconds(Int.random(in: 50...250)))
                    if await probe.kill().contains("drained") { break }
                    kills += 1
                }
                let last = try await Probe(["drain", directory.path, "drain"], environment: sync).wait()
                #expect(last.contains("drained"))
                let received = server.requests(path: "/post")
                let keys = received.compactMap { $0.header("Idempotency-Key") }
                let bodies = Set(received.map { String(decoding: $0.body, as: UTF8.self) })
                let duplicates = received.count - Set(keys).count
                #expect(keys.count == received.count)
                #expect(bodies.count == total, "\(total - bodies.count) entries lost")
                #expect(Set(keys).count == total)
                #expect(duplicates <= kills, "\(duplicates) duplicate deliveries for \(kills) kills")
                print("crash (b): \(total) entries, \(kills) kills, \(received.count) deliveries, \(duplicates) duplicates, 0 after dedupe by key")
            }
        }
    }
}
