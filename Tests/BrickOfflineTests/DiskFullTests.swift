import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestSupport
import Foundation
import Testing

/// A full disk: a 256 KiB tmpfs mounted for the queue (root only; reported as skipped otherwise).
@Suite("Offline queue on a full disk", .timeLimit(.minutes(2)))
struct DiskFullTests {
    @Test(
        "add fails with a storage error once the disk is full; what was acknowledged stays intact",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs")
    )
    func diskFull() async throws {
        try await withDirectory { directory in
            let mountPoint = directory.appendingPathComponent("small").path
            try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
            let mounted = try Self.shell("mount -t tmpfs -o size=256k tmpfs '\(mountPoint)'")
            try #require(mounted == 0, "mount failed")
            defer { _ = try? Self.shell("umount '\(mountPoint)'") }
            let url = "http://127.0.0.1:\(closedPort())/post"
            let body = String(repeating: "x", count: 2000)
            var acknowledged: [OfflineEntry.ID] = []
            var failure: BrickError?
            do {
                let queue = try PersistentRequestQueue(
                    name: "full",
                    directory: URL(fileURLWithPath: mountPoint),
                    session: session(),
                    retryInterval: .seconds(3600)
                )
                for _ in 0..<1000 {
                    do {
                        let request = try TransportRequest(
                            method: .post,
                            url: url,
                            headers: [],
                            body: .data(Data(body.utf8))
                        )
                        acknowledged.append(try await queue.add(request, options: .init(notBefore: .distantFuture)))
                    } catch {
                        failure = error as? BrickError ?? BrickError(.transport, message: "\(error)")
                        break
                    }
                }
            }
            let error = try #require(failure, "1,000 adds of 2 KB fitted in 256 KiB")
            #expect(error.code == .storage)
            #expect((error.underlying as? OfflineStoreError)?.kind == .diskFull, "\(error)")
            #expect(!acknowledged.isEmpty)
            // Reopened (once the queue's store has let the file go): every acknowledged entry is
            // there, and the file is sound.
            let store = try await SQLiteOfflineStore.open(name: "full", directory: URL(fileURLWithPath: mountPoint))
            let stored = Set(try await store.list(queue: "full").map(\.id))
            #expect(Set(acknowledged).isSubset(of: stored))
            #expect(try await store.integrityCheck() == "ok")
        }
    }

    /// Runs `command` with `/bin/sh` and returns its exit status (through ``Subprocess``: Foundation's
    /// `Process.run()` crashed — a bad `memmove` — while other tests held many descriptors).
    static func shell(_ command: String) throws -> Int32 {
        Subprocess.wait(try Subprocess.spawn(command))
    }
}
