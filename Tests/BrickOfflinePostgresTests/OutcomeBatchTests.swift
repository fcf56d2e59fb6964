import BrickOfflineTestSupport
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import BrickTestSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// Attempt outcomes that end together are written in one statement and one commit, each still
/// fenced by its own lease.
@Suite("PostgreSQL store: attempt outcomes written in batches", .serialized, .timeLimit(.minutes(2)))
struct OutcomeBatchTests {
    private let logger = Logger(label: "outcome-batch")

    @Test("60 outcomes held behind a table lock (completions, reschedules, burials, and 9 with stale leases) are written together: each changes its entry as alone, the stale ones nothing, the counters add up")
    func batch() async throws {
        try await withFleetStore { store, running in
            _ = try await addEntries(60, to: store, queue: "batch", url: { "http://127.0.0.1:9/post?n=\($0)" })
            let leased = try await store.lease(queue: "batch", limit: 60, cap: 60, now: Date(), for: .seconds(3600))
            try #require(leased.count == 60)
            let attempt = OfflineEntry.AttemptRecord(date: Date(), status: 503, error: nil)
            // Another connection holds the entry table: the first outcome's statement waits, and the
            // other 59 queue up behind it.
            let locked = ConditionFlag()
            let release = ConditionFlag()
            let holder = Task {
                try await running.client.withConnection { connection in
                    try await connection.query("BEGIN", logger: logger)
                    try await connection.query("LOCK TABLE \(unescaped: store.schema).entry IN EXCLUSIVE MODE", logger: logger)
                    locked.set()
                    await release.wait()
                    try await connection.query("COMMIT", logger: logger)
                }
            }
            await locked.wait()
            let results = Task {
                try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
                    for (index, entry) in leased.enumerated() {
                        let lease = index % 7 == 3 ? UUID() : entry.lease!.token  // 9 stale leases, 3 of each kind
                        group.addTask {
                            switch index % 3 {
                            case 0: return (index, try await store.complete(entry.id, lease: lease))
                            case 1:
                                return (
                                    index,
                                    try await store.reschedule(
                                        entry.id, lease: lease, notBefore: Date().addingTimeInterval(3600), attempt: attempt, countsAttempt: true
                                    )
                                )
                            default:
                                return (index, try await store.bury(entry.id, lease: lease, reason: "gone", attempt: attempt, countsAttempt: true))
                            }
                        }
                    }
                    var all: [Int: Bool] = [:]
                    for try await (index, changed) in group { all[index] = changed }
                    return all
                }
            }
            await eventually { store.outcomes.waitingCount == 59 }
            #expect(store.outcomes.waitingCount == 59, "the 59 others queued up behind the first")
            release.set()
            let changed = try await results.value
            try await holder.value
            for index in 0..<60 {
                #expect(changed[index] == (index % 7 != 3), "outcome \(index)")
            }
            // 20 completions, 3 of them stale: 17 gone; 20 reschedules (3 stale: still leased);
            // 20 burials (3 stale).
            let pending = try await store.list(queue: "batch")
            let dead = try await store.deadLetters(queue: "batch")
            #expect(pending.count == 60 - 17 - 17, "\(pending.count)")
            #expect(dead.count == 17)
            #expect(dead.allSatisfy { $0.deadLetter?.reason == "gone" && $0.attempts == 1 && $0.lastAttempt?.status == 503 })
            let rescheduled = pending.filter { $0.attempts == 1 }
            #expect(rescheduled.count == 17)
            #expect(rescheduled.allSatisfy { $0.lease == nil && $0.notBefore > Date().addingTimeInterval(3000) })
            let minutes = try await store.deliveries(since: Date().addingTimeInterval(-120)).filter { $0.queue == "batch" }
            #expect(minutes.map(\.delivered).reduce(0, +) == 17)
            #expect(minutes.map(\.failed).reduce(0, +) == 34)
        }
    }
}

/// A flag tasks wait on, set once.
final class ConditionFlag: Sendable {
    private let state = Mutex<(set: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func set() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.set = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        waiters.forEach { $0.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.set { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
