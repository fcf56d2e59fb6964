// offline-bench [DIRECTORY]
//
// The offline store's figures, in one run (no network; requests are stored, never sent), beside a
// baseline measured in the same run on the same disk: raw SQLite through GRDB (the store's library)
// with the store's table and settings, one commit per add, 16 and 240 adds per commit, a 600-byte
// payload. One producer is compared with the first, sixteen with 16 adds per commit.
//   - durable adds per second through PersistentRequestQueue.add, synchronous=FULL (and NORMAL),
//     with 1 and with 16 producers (group commit shares one transaction among concurrent adds);
//   - the time to reopen a store holding 100,000 pending entries, and to count them and lease the
//     first one; resident memory before and after, with the 100,000 waiting.
// DIRECTORY defaults to a new folder under /tmp (a disk on most machines; tmpfs makes FULL free).
import BrickOffline
import BrickRequest
import Foundation

func residentMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Double(line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) / 1024
    }
    return 0
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

let root = CommandLine.arguments.dropFirst().first.map { URL(fileURLWithPath: $0) }
    ?? URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("offline-bench-\(getpid())")
try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: root) }
// Nothing listens here, and every entry is scheduled far ahead: the queue never sends.
let request = try TransportRequest(
    method: .post,
    url: "http://127.0.0.1:9/sales",
    headers: [("Content-Type", "application/json")],
    body: .data(Data(#"{"sku":"brick-2x4","amount":12}"#.utf8))
)
let later = PersistentRequestQueue.EntryOptions(notBefore: .distantFuture)
let session = Session(reachability: AlwaysReachable())
let clock = ContinuousClock()

// The baseline first, in the same run and on the same disk: raw SQLite through GRDB with the
// store's table, one commit per add, and 240 adds per commit.
let rawPayload = 600
// OFFLINE_BENCH_PROFILE=1: only 2,000 adds of one producer (for a profiler), nothing else.
if ProcessInfo.processInfo.environment["OFFLINE_BENCH_PROFILE"] == "async" {
    let rate = try await RawSQLite.asyncAdds(at: root.appendingPathComponent("a.sqlite").path, synchronous: "FULL", total: 2000, payload: 600)
    print("raw async adds/s", Int(rate))
    exit(0)
}
if ProcessInfo.processInfo.environment["OFFLINE_BENCH_PROFILE"] == "1" {
    let queue = try PersistentRequestQueue(name: "profile", directory: root, session: session)
    for _ in 0..<2_000 { try await queue.add(request, options: later) }
    exit(0)
}
var baseline: [String: (single: Double, batched: Double, sixteen: Double)] = [:]
print("| raw SQLite (GRDB, same table, WAL) | synchronous | rows | adds/s |")
print("|---|---|---:|---:|")
for synchronous in ["FULL", "NORMAL"] {
    let single = try RawSQLite.adds(
        at: root.appendingPathComponent("raw-single-\(synchronous).sqlite").path,
        synchronous: synchronous, total: 2_000, perCommit: 1, payload: rawPayload
    )
    let batched = try RawSQLite.adds(
        at: root.appendingPathComponent("raw-batched-\(synchronous).sqlite").path,
        synchronous: synchronous, total: 24_000, perCommit: 240, payload: rawPayload
    )
    // Sixteen producers can have at most sixteen adds in one group commit: the same batching.
    let sixteen = try RawSQLite.adds(
        at: root.appendingPathComponent("raw-sixteen-\(synchronous).sqlite").path,
        synchronous: synchronous, total: 24_000, perCommit: 16, payload: rawPayload
    )
    baseline[synchronous.lowercased()] = (single, batched, sixteen)
    print("| one commit per add | \(synchronous) | 2000 | \(Int(single)) |")
    print("| 16 adds per commit | \(synchronous) | 24000 | \(Int(sixteen)) |")
    print("| 240 adds per commit | \(synchronous) | 24000 | \(Int(batched)) |")
}
print("")
print("| store | producers | adds | seconds | adds/s | vs raw |")
print("|---|---:|---:|---:|---:|---:|")
for synchronous in [SQLiteOfflineStore.Synchronous.full, .normal] {
    for (producers, perProducer) in [(1, 2_000), (16, 1_500)] {
        let name = "adds-\(synchronous)-\(producers)"
        let queue = try PersistentRequestQueue(
            name: name,
            directory: root,
            session: session,
            synchronous: synchronous
        )
        let elapsed = try await clock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<producers {
                    group.addTask {
                        for _ in 0..<perProducer { try await queue.add(request, options: later) }
                    }
                }
                try await group.waitForAll()
            }
        }
        let total = producers * perProducer
        let rate = Double(total) / seconds(elapsed)
        // One producer is held to one commit per add; sixteen to sixteen adds per commit (at most
        // that many share a group commit).
        let raw = baseline["\(synchronous)"].map { producers == 1 ? $0.single : $0.sixteen } ?? rate
        let against = producers == 1 ? "one commit per add" : "16 per commit"
        print(
            "| \(synchronous) | \(producers) | \(total) | \(String(format: "%.2f", seconds(elapsed))) | "
                + "\(Int(rate)) | \(String(format: "%.2f", rate / raw))× (\(against)) |"
        )
    }
}

// 100,000 pending entries, written in batches straight to the store.
let big = "pending"
do {
    let store = try SQLiteOfflineStore(name: big, directory: root, synchronous: .normal)
    let payload = Data(#"{"version":1,"method":"POST","url":"http://127.0.0.1:9/sales","headers":[],"body":null}"#.utf8)
    for _ in 0..<100 {
        let drafts = (0..<1000).map { _ in
            OfflineEntry.Draft(queue: big, payload: payload, createdAt: Date(), notBefore: .distantFuture)
        }
        _ = try await store.add(drafts, dedupe: .reject)
    }
}
try await Task.sleep(for: .milliseconds(100))
let before = residentMiB()
var reopened: SQLiteOfflineStore?
let reopen = try clock.measure { reopened = try SQLiteOfflineStore(name: big, directory: root) }
let store = reopened!
var counted = 0
let count = try await clock.measure { counted = try await store.count(queue: big) }
let queue = PersistentRequestQueue(name: big, store: store, session: session)
let lease = try await clock.measure { _ = try await store.lease(queue: big, limit: 1, now: .distantFuture, for: .seconds(60)) }
_ = await queue.count
let after = residentMiB()
print("")
print("| 100,000 pending entries | |")
print("|---|---:|")
print("| reopen (open, check, migrate, release leases) | \(String(format: "%.1f", seconds(reopen) * 1000)) ms |")
print("| count (\(counted)) | \(String(format: "%.1f", seconds(count) * 1000)) ms |")
print("| lease the first | \(String(format: "%.1f", seconds(lease) * 1000)) ms |")
print("| resident memory before reopening / after | \(String(format: "%.1f", before)) / \(String(format: "%.1f", after)) MiB |")
