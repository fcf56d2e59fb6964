import BrickOfflineCore
import BrickOfflineTestSupport
import BrickOffline
import BrickTestSupport
import Foundation
import GRDB
import Synchronization
import Testing

/// The group commit's decisions, without I/O: who commits, who waits, who commits next.
@Suite("Group commit: who commits, who waits, who commits next (table)", .timeLimit(.minutes(3)))
struct GroupCommitStateMachineTests {
    /// One step of a table row and what it must answer.
    enum Step {
        case arrive(Int, expect: GroupCommit.StateMachine<Int>.Arrival)
        case take(expect: [Int])
        case committed(expect: Int?)  // nil: idle; n: n commits next
    }

    static let rows: [(String, [Step])] = [
        ("alone: commits at once, then idle", [.arrive(1, expect: .commitNow), .take(expect: []), .committed(expect: nil)]),
        (
            "arrivals during a commit wait; all but the first of them join the next commit",
            [
                .arrive(1, expect: .commitNow), .take(expect: []),
                .arrive(2, expect: .wait), .arrive(3, expect: .wait), .arrive(4, expect: .wait),
                .committed(expect: 2),  // 2 commits next, its batch first…
                .take(expect: [3, 4]),  // …with 3 and 4 in the same transaction
                .committed(expect: nil),
            ]
        ),
        (
            "arrivals taken into the running commit are not handed the role",
            [
                .arrive(1, expect: .commitNow), .arrive(2, expect: .wait), .take(expect: [2]),
                .committed(expect: nil), .arrive(3, expect: .commitNow), .take(expect: []), .committed(expect: nil),
            ]
        ),
        (
            "first come, first committer: arrivals keep their order",
            [
                .arrive(1, expect: .commitNow), .take(expect: []), .arrive(5, expect: .wait), .arrive(6, expect: .wait),
                .committed(expect: 5), .arrive(7, expect: .wait), .take(expect: [6, 7]), .committed(expect: nil),
            ]
        ),
    ]

    @Test("every row", arguments: rows.indices)
    func row(_ index: Int) {
        let (name, steps) = Self.rows[index]
        var machine = GroupCommit.StateMachine<Int>()
        for (number, step) in steps.enumerated() {
            switch step {
            case .arrive(let waiter, let expected):
                let got = machine.arrive(waiter)
                #expect(got == expected, "\(name), step \(number)")
            case .take(let expected):
                #expect(machine.takeWaiting() == expected, "\(name), step \(number)")
            case .committed(let expected):
                switch machine.committed() {
                case .idle: #expect(expected == nil, "\(name), step \(number)")
                case .nextCommitter(let next): #expect(next == expected, "\(name), step \(number)")
                }
            }
        }
    }
}

@Suite("Group commit on SQLite: a refusal among batches written together", .timeLimit(.minutes(3)))
struct GroupCommitRefusalTests {
    @Test("16 adds held behind another connection's write lock commit together; the two refused refuse only themselves")
    func refusalInAGroup() async throws {
        try await withDirectory { directory in
            // The first add's commit waits for the lock while the other 15 gather behind it: under
            // ThreadSanitizer on a loaded machine their 15 threads took longer than the store's 5 s
            // wait (all 16 refused as busy). The wait here outlasts the holder's own 2-minute bound.
            let store = try await SQLiteOfflineStore.open(name: "q", directory: directory, busyTimeoutMilliseconds: 150_000)
            _ = try await store.add(
                [OfflineEntry.Draft(queue: "q", payload: Data("taken".utf8), dedupeKey: "taken", createdAt: Date())],
                dedupe: .reject
            )
            // Another connection, on a thread of its own, holds the write lock: the first add's
            // commit waits for it and the other 15 queue up in the group commit behind it.
            let holder = try DatabaseQueue(path: directory.appendingPathComponent("q.sqlite").path)
            let locked = DispatchSemaphore(value: 0)
            let released = DispatchSemaphore(value: 0)
            let gathered = Mutex(false)
            Thread {
                try? holder.inTransaction(.exclusive) { _ in
                    locked.signal()
                    // Until all 16 are in the group commit — in the first commit (waiting for this
                    // lock) or queued behind it; one that arrived just before the first commit
                    // began is in it, not waiting (never longer than 2 minutes: a failure, not a hang).
                    let deadline = Date().addingTimeInterval(120)
                    while store.groupCommit.gatheredCount < 16 && Date() < deadline { usleep(1000) }
                    gathered.withLock { $0 = store.groupCommit.gatheredCount >= 16 }
                    return .commit
                }
                try? holder.close()
                released.signal()
            }.start()
            // On a thread of its own: `DispatchQueue.global()` is the cooperative pool's queue on Linux.
            await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    locked.wait()
                    continuation.resume()
                }
            }
            // Each add on a thread of its own: the committer blocks its thread while it waits for
            // the lock (by design: the store's process owns its file), and the cooperative pool
            // may be busy with other tests.
            let executor = ThreadPerJobExecutor()
            let adds = Task {
                await withTaskGroup(of: Result<[OfflineEntry.ID], any Error>.self) { group in
                    for index in 0..<16 {
                        group.addTask(executorPreference: executor) {
                            let draft = OfflineEntry.Draft(
                                queue: "q",
                                payload: Data("\(index)".utf8),
                                dedupeKey: index % 8 == 0 ? "taken" : "k\(index)",
                                createdAt: Date()
                            )
                            do { return .success(try await store.add([draft], dedupe: .reject)) } catch { return .failure(error) }
                        }
                    }
                    var all: [Result<[OfflineEntry.ID], any Error>] = []
                    for await outcome in group { all.append(outcome) }
                    return all
                }
            }
            let outcomes = await adds.childValue
            released.wait()
            #expect(gathered.withLock { $0 }, "the 16 adds gathered behind the lock")
            let refused = outcomes.compactMap { outcome -> OfflineStoreError? in
                if case .failure(let error) = outcome { return error as? OfflineStoreError }
                return nil
            }
            #expect(refused.count == 2)
            #expect(refused.allSatisfy { $0.kind == .duplicate })
            #expect(try await store.count(queue: "q") == 1 + 14)
            #expect(store.savepointRounds.load(ordering: .relaxed) >= 1, "the refused batches were written in a group")
        }
    }
}

/// Runs every job on a new thread of its own (for tests whose tasks block their thread).
final class ThreadPerJobExecutor: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        Thread { job.runSynchronously(on: executor) }.start()
    }
}
