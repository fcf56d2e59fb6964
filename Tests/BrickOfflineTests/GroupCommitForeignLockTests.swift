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
    /// `BEGIN IMMEDIATE` on a connection of its own, held on a thread of its own until released.
    final class ForeignLock: Sendable {
        private let release = DispatchSemaphore(value: 0)
        private let finished = DispatchSemaphore(value: 0)

        init(path: String) throws {
            let queue = try DatabaseQueue(path: path)
            let taken = DispatchSemaphore(value: 0)
            let failure = Mutex<(any Error)?>(nil)
            Thread.detachNewThread { [release, finished] in
                do {
                    try queue.inDatabase { db in
                        try db.execute(sql: "BEGIN IMMEDIATE")
                        taken.signal()
                        release.wait()
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

        func letGo() {
            release.signal()
            finished.wait()
        }
    }

    @Test("a connection holding the write lock holds no cooperative thread: the adds of as many stores as the pool has threads wait on their writer queues, a task runs meanwhile, and every add lands once the lock is let go")
    func foreignLock() async throws {
        let width = max(2, ProcessInfo.processInfo.activeProcessorCount)
        try await withDirectory { directory in
            var stores: [SQLiteOfflineStore] = []
            var locks: [ForeignLock] = []
            for index in 0..<width {
                stores.append(try await SQLiteOfflineStore.open(name: "s\(index)", directory: directory))
                locks.append(try ForeignLock(path: directory.appendingPathComponent("s\(index).sqlite").path))
            }
            let all = stores
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
            // Every store's committer found the lock held and handed its round to the writer queue.
            await eventually(within: .seconds(4)) { all.allSatisfy { $0.busyHandoffs.load(ordering: .relaxed) >= 1 } }
            #expect(all.allSatisfy { $0.busyHandoffs.load(ordering: .relaxed) >= 1 })
            // The cooperative pool is free while every lock is still held: a task runs. (Committers
            // waiting in SQLite's busy handler on cooperative threads would hold all of them here,
            // and the adds would fail with "database is locked" after 5 s.)
            let ran = await Task.detached { true }.value
            #expect(ran)
            for lock in locks { lock.letGo() }
            try await adds.value
            for store in all { #expect(try await store.count(queue: "q") == 16) }
        }
    }
}
