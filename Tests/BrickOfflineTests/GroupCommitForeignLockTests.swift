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

        /// Waits on a thread of its own: the committers this waits for need the cooperative threads.
        func waitUntilReleased() async {
            _ = try? await Subprocess.offPool { [finished] in finished.wait() }
        }
    }

    @Test("a connection holding the write lock holds no cooperative thread: the committers of as many stores as the pool has threads hand their rounds to their writer queues while it is held, and every add lands once it is let go")
    func foreignLock() async throws {
        let width = max(2, ProcessInfo.processInfo.activeProcessorCount)
        try await withDirectory { directory in
            var stores: [SQLiteOfflineStore] = []
            for index in 0..<width {
                stores.append(try await SQLiteOfflineStore.open(name: "s\(index)", directory: directory))
            }
            let all = stores
            // Released, from the lock's own thread, once every store's committer found the lock
            // held and handed its round to its writer queue: no cooperative thread is needed to let
            // go, so a loaded machine cannot push the release past the writers' 5 s busy timeout.
            // (Before this change, a committer waited in SQLite's busy handler on its cooperative
            // thread — as many stores as the pool has threads held all of them — and failed its adds
            // after 5 s with "database is locked".)
            let letGo: @Sendable () -> Bool = { all.allSatisfy { $0.busyHandoffs.load(ordering: .relaxed) >= 1 } }
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
            for lock in locks { await lock.waitUntilReleased() }
            try await adds.value
            #expect(all.allSatisfy { $0.busyHandoffs.load(ordering: .relaxed) >= 1 })
            for store in all { #expect(try await store.count(queue: "q") == 16) }
        }
    }
}
