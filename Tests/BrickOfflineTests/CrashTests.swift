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
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        let executable = String(decoding: buffer[0..<max(length, 0)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return URL(fileURLWithPath: executable).deletingLastPathComponent()
            .appendingPathComponent("brick-offline-probe").path
    }

    /// A running probe whose output is read line by line.
    final class Probe: @unchecked Sendable {  // its buffer is touched by one waiting thread at a time
        let process = Process()
        let output = Pipe()
        private var buffer = Data()

        init(_ arguments: [String], environment: [String: String] = [:]) throws {
            process.executableURL = URL(fileURLWithPath: CrashTests.probePath)
            process.arguments = arguments
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            var merged = ProcessInfo.processInfo.environment
            merged.merge(environment) { _, new in new }
            process.environment = merged
            try process.run()
        }

        /// Kills the probe with SIGKILL and returns every complete line it wrote.
        func kill() async -> [String] {
            Glibc.kill(process.processIdentifier, SIGKILL)
            return await wait()
        }

        /// Waits for the probe to end (on a thread of its own: the test's threads are the
        /// cooperative pool's, which other tests need meanwhile) and returns its lines.
        func wait() async -> [String] {
            await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    self.process.waitUntilExit()
                    continuation.resume(returning: self.lines())
                }
            }
        }

        private func lines() -> [String] {
            buffer.append(output.fileHandleForReading.readDataToEndOfFile())
            let text = String(decoding: buffer, as: UTF8.self)
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
