import BrickOffline
import BrickOfflineTestSupport
import BrickTestSupport
import Dispatch
import Foundation
import GRDB
import Synchronization
import Testing

/// Another connection holding SQLite's write lock (a `sqlite3` shell, a backup) while producers
/// add: the group commit must not wait for the lock on a cooperative thread.
@Suite("Group commit beside a foreign writer", .timeLimit(.minutes(2)))
struct GroupCommitForeignLockTests {
    /// `BEGIN IMMEDIATE` on a connection of its own, held on a thread of its own until `letGo`
    /// says so (polled there every millisecond: the release never waits for a cooperative thread).
    final class ForeignLock: Sendable {
        private let finished = DispatchSemaphore(value: 0)

        init(path: String, letGo: @escaping @Sendable () -> Bool) throws {
            let queue = try DatabaseQueue(path: path)
            let taken = DispatchSemaphore(value: 0)
            let failure = Mutex<(any Error)?>(nil)
            Thread.detachNewThread { [finished] in
                do {
                    try queue.inDatabase { db in
                        try db.execute(sql: "BEGIN IMMEDIATE")
                        taken.signal()
                        while !letGo() { usleep(1000) }
                        try db.execute(sql: "COMMIT")
                    }
                } catch {
                    failure.withLock { $0 = error }
                    taken.signal()
                }
                finished.signal()
            }
            taken.wait()
            if let error = failure.withLock({ $0 }) { throw error }
        }

        func waitUntilReleased() {
            finished.wait()
        }
    }

    @Test("a connection holding the write lock holds no cooperative thread: the adds of as many stores as the pool has threads wait on their writer queues, a task runs meanwhile, and every add lands once the lock is let go")
    func foreignLock() async throws {
        let width = max(2, ProcessInfo.processInfo.activeProcessorCount)
        try await withDirectory { directory in
            var stores: [SQLiteOfflineStore] = []
            for index in 0..<width {
                stores.append(try await SQLiteOfflineStore.open(name: "s\(index)", directory: directory))
            }
            let all = stores
            // Released once a task ran on the cooperative pool after every store handed its round
            // to its writer queue — or 4 s after the locks were taken (within the writers' 5 s busy
            // timeout), the task not having run: a failure below. Committers waiting in SQLite's
            // busy handler on cooperative threads would hold all of them for 5 s.
            let probeRan = Atomic<Bool>(false)
            let timedOut = Atomic<Bool>(false)
            let taken = ContinuousClock.now
            let letGo: @Sendable () -> Bool = {
                if probeRan.load(ordering: .relaxed) { return true }
                guard ContinuousClock.now - taken > .seconds(4) else { return false }
                timedOut.store(true, ordering: .relaxed)
                return true
            }
            var locks: [ForeignLock] = []
            for index in 0..<width {
                locks.append(try ForeignLock(path: directory.appendingPathComponent("s\(index).sqlite").path, letGo: letGo))
            }
            let adds = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for store in all {
                        for number in 0..<16 {
                            group.addTask {
                                let draft = OfflineEntry.Draft(queue: "q", payload: Data("\(number)".utf8), createdAt: Date())
                                _ = try await store.add([draft], dedupe: .reject)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            // The task on the cooperative pool, once every committer waits on its writer queue.
            await Task.detached {
                while !all.allSatisfy({ $0.busyHandoffs.load(ordering: .relaxed) >= 1 }) {
                    // The locks let go without it (a failure), or the test's time is up.
                    if timedOut.load(ordering: .relaxed) || Task.isCancelled { return }
                    try? await Task.sleep(for: .milliseconds(1))
                }
                probeRan.store(true, ordering: .relaxed)
            }.value
            for lock in locks { lock.waitUntilReleased() }
            try await adds.value
            let gaveUp = timedOut.load(ordering: .relaxed)
            #expect(!gaveUp, "no task ran on the cooperative pool while the locks were held")
            #expect(all.allSatisfy { $0.busyHandoffs.load(ordering: .relaxed) >= 1 })
            for store in all { #expect(try await store.count(queue: "q") == 16) }
        }
    }
}
