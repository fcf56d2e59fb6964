import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestSupport
import Foundation
import Glibc
import HTTPTypes
import Testing

/// A FUSE mount (`PowerLoss/lazyfs.py`, fusepy) that keeps every write not yet fsynced in memory
/// and drops it on a simulated power cut, as LazyFS does for Jepsen: what a process wrote through
/// it survives a cut only if it was synced.
final class LazyFSMount: Sendable {
    let base: String
    /// Where the stores live (the FUSE mount).
    let directory: URL
    private let pid: pid_t

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("PowerLoss/lazyfs.py").path

    /// Why the suite cannot run here, or `nil`.
    static var unavailableReason: String? {
        if getuid() != 0 { return "needs root to mount a FUSE file system" }
        if !FileManager.default.fileExists(atPath: "/dev/fuse") { return "needs /dev/fuse" }
        return nil
    }

    init() throws {
        base = NSTemporaryDirectory() + "brick-lazyfs-" + UUID().uuidString
        directory = URL(fileURLWithPath: base + "/mnt")
        try FileManager.default.createDirectory(atPath: base + "/backing", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/mnt", withIntermediateDirectories: true)
        pid = try Subprocess.spawn(
            "exec python3 '\(Self.script)' '\(base)/backing' '\(base)/mnt' > '\(base)/out' 2> '\(base)/err'"
        )
        let deadline = Date().addingTimeInterval(20)
        while (try? String(contentsOfFile: base + "/out", encoding: .utf8))?.contains("mounted") != true {
            guard Date() < deadline else {
                let errors = (try? String(contentsOfFile: base + "/err", encoding: .utf8)) ?? ""
                kill(pid, SIGKILL)
                throw Subprocess.Failure(description: "lazyfs did not mount (fusepy and libfuse2 installed?): \(errors)")
            }
            usleep(20_000)
        }
    }

    /// The power cut: every write not yet fsynced is gone. Returns once the file system did it.
    func cut() async {
        let before = cuts
        _ = FileManager.default.createFile(atPath: base + "/lazyfs.cut", contents: nil)
        await eventually { self.cuts > before }
    }

    private var cuts: Int {
        ((try? String(contentsOfFile: base + "/lazyfs.log", encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    deinit {
        _ = try? Subprocess.runBlocking("umount -l '\(base)/mnt' 2>/dev/null; true")
        kill(pid, SIGKILL)
        _ = Subprocess.wait(pid)
        try? FileManager.default.removeItem(atPath: base)
    }
}

@Suite(
    "Power loss: a file system that drops what was not fsynced (FUSE, root)",
    .serialized,
    .timeLimit(.minutes(5)),
    .enabled(if: LazyFSMount.unavailableReason == nil, "\(LazyFSMount.unavailableReason ?? "")")
)
struct PowerLossTests {
    /// File I/O through the FUSE mount (a Python process) can take seconds under load: off the
    /// cooperative pool.
    private func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await Subprocess.offPool(body)
    }
    /// The numbers of a store's entries, dead letters included (the probe's deliveries to a closed
    /// port fail, and an entry that failed often enough becomes one).
    private func everyNumber(_ store: SQLiteOfflineStore) async throws -> Set<Int> {
        struct Payload: Decodable { var body: Data? }
        let entries = try await store.list(queue: "sales") + store.deadLetters(queue: "sales")
        return Set(entries.compactMap { entry in
            (try? JSONDecoder().decode(Payload.self, from: entry.payload))?.body.flatMap { Int(String(decoding: $0, as: UTF8.self)) }
        })
    }

    /// Adds in a probe process until `ack`s come, a random while more, then SIGKILL and a power
    /// cut; returns what the probe acknowledged.
    private func addThenCut(_ mount: LazyFSMount, cycle: Int, environment: [String: String] = [:]) async throws -> Set<Int> {
        let url = "http://127.0.0.1:\(closedPort())/post"
        let probe = try CrashTests.Probe(
            ["add", mount.directory.path, "sales", url, String(cycle * 1_000_000)], environment: environment
        )
        // Cut after a random number of acknowledged adds (an event, not a time).
        let goal = Int.random(in: 20...300)
        await eventually(within: .seconds(60)) { probe.lines().filter { $0.hasPrefix("ack ") }.count >= goal }
        let lines = await probe.kill()
        await mount.cut()
        return Set(lines.compactMap { $0.hasPrefix("ack ") ? Int($0.dropFirst(4)) : nil })
    }

    @Test("synchronous .full: 20 cuts during adds lose no acknowledged add; the store opens intact each time")
    func fullLosesNothing() async throws {
        let mount = try await offThread { try LazyFSMount() }
        var acknowledged = Set<Int>()
        var added = 0
        for cycle in 0..<20 {
            let acked = try await addThenCut(mount, cycle: cycle)
            acknowledged.formUnion(acked)
            added += acked.count
            let store = try await offThread { try SQLiteOfflineStore(name: "sales", directory: mount.directory) }
            #expect(try await store.integrityCheck() == "ok", "cycle \(cycle)")
            let stored = try await everyNumber(store)
            let lost = acknowledged.subtracting(stored)
            #expect(lost.isEmpty, "cycle \(cycle): \(lost.count) acknowledged adds lost")
        }
        #expect(added > 20)
        print("power loss (.full): \(added) acknowledged adds over 20 cuts, 0 lost")
    }

    @Test("synchronous .normal: after a cut the store opens intact and holds nothing that was not added; acknowledged adds since the last checkpoint may be lost, as documented")
    func normalStaysIntact() async throws {
        let mount = try await offThread { try LazyFSMount() }
        var acknowledged = Set<Int>()
        var lostTotal = 0
        for cycle in 0..<8 {
            let acked = try await addThenCut(mount, cycle: cycle, environment: ["BRICK_PROBE_SYNC": "normal"])
            acknowledged.formUnion(acked)
            let store = try await offThread { try SQLiteOfflineStore(name: "sales", directory: mount.directory, synchronous: .normal) }
            #expect(try await store.integrityCheck() == "ok", "cycle \(cycle)")
            let stored = try await everyNumber(store)
            // Nothing that no probe added: every number comes from this or an earlier cycle's range.
            #expect(stored.allSatisfy { $0 >= 0 && $0 / 1_000_000 <= cycle })
            let lost = acknowledged.subtracting(stored)
            lostTotal += lost.count
            // What is lost is gone for good: forget it, so the next cycle counts only its own.
            acknowledged.subtract(lost)
        }
        print("power loss (.normal): the store opened intact after 8 cuts; \(lostTotal) of \(acknowledged.count + lostTotal) acknowledged adds lost (no checkpoint had synced them)")
    }

    @Test("the response cache after 2 cuts during writes: it opens, integrity ok, every body read matches its digest")
    func cacheNeverTorn() async throws {
        let mount = try await offThread { try LazyFSMount() }
        var checked = 0
        // Two cuts: through a FUSE file system in Python a cycle takes about 30 s.
        for cycle in 0..<2 {
            let probe = try CrashTests.Probe(["cache-write", mount.directory.path, "crash"])
            // Enough stores that some reach the database file (a checkpoint: the cache syncs
            // only then, `synchronous = NORMAL`), and body files beside them.
            let goal = Int.random(in: 2_000...2_500)
            await eventually(within: .seconds(120)) { probe.lines().count >= goal }
            _ = await probe.kill()
            await mount.cut()
            let directory = mount.directory
            let (integrity, read, torn) = try await offThread { () throws -> (String, Int, [Int]) in
                let cache = try SQLiteResponseCache(name: "crash", directory: directory, maxBytes: 64 * 1024 * 1024)
                var read = 0
                var torn: [Int] = []
                for index in 0..<50 {
                    for response in try cache.cachedResponses(for: key("http://probe/k/\(index)")) {
                        if response.headerFields[HTTPField.Name("X-Digest")!] != fnv1a(response.body) { torn.append(index) }
                        read += 1
                    }
                }
                return (try cache.integrityCheck(), read, torn)
            }
            #expect(integrity == "ok", "cycle \(cycle)")
            #expect(torn.isEmpty, "cycle \(cycle): keys \(torn) hold a torn or mismatched body")
            checked += read
        }
        #expect(checked > 0)
        print("power loss (cache): \(checked) responses read whole after 2 cuts")
    }
}
