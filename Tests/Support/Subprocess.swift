import Foundation

/// Runs `/bin/sh -c` with `posix_spawn`, closing every inherited descriptor above stderr.
///
/// Foundation's `Process.run()` crashed here (a bad memcpy) while other tests in the same process
/// held over a thousand sockets; spawning directly avoids it, and `closefrom` keeps children from
/// holding the test's sockets open.
package enum Subprocess {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(description: String) { self.description = description }
    }

    /// glibc ≥ 2.34's `posix_spawn_file_actions_addclosefrom_np`, which the Swift overlay does not
    /// import (it needs `_GNU_SOURCE`).
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
        else { return nil }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()

    /// The path of `name`, an executable of this package that `swift test` built next to the
    /// running test binary (the probes under `Tests/Probes`).
    package static func sibling(_ name: String) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        let executable =
            length > 0 ? String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        return URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent(name).path
    }

    /// Runs a script to completion and returns its combined output; throws on a non-zero exit.
    ///
    /// Waits on a thread of its own: a test that waits for a process never holds one of the
    /// cooperative pool's threads (two on a 2-core machine) while the rest of the suite runs.
    @discardableResult
    package static func run(_ script: String) async throws -> String {
        try await onThread { try runBlocking(script) }.get()
    }

    /// Waits for a child, on a thread of its own, and returns its exit status (or 128 + signal).
    package static func exitStatus(of pid: pid_t) async -> Int32 {
        await onThread { wait(pid) }
    }

    /// ``run(_:)`` blocking the calling thread, for code that is not async (a fixture's setup).
    @discardableResult
    package static func runBlocking(_ script: String) throws -> String {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw Failure(description: "pipe failed") }
        let pid = try spawn(script, stdout: pipeFDs[1])
        close(pipeFDs[1])
        var output = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(pipeFDs[0], &buffer, buffer.count)
            if count <= 0 { break }
            output.append(contentsOf: buffer[0..<count])
        }
        close(pipeFDs[0])
        let status = wait(pid)
        let text = String(decoding: output, as: UTF8.self)
        guard status == 0 else { throw Failure(description: "command failed (\(status)): \(script)\n\(text)") }
        return text
    }

    /// Starts a script in the background; its output goes to /dev/null unless `stdout` is given.
    package static func spawn(_ script: String, stdout: Int32? = nil, stdin: Int32? = nil) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let stdin {
            posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let stdout {
            posix_spawn_file_actions_adddup2(&actions, stdout, 1)
            posix_spawn_file_actions_adddup2(&actions, stdout, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
        // A clean signal mask and default dispositions: a child spawned from a thread that blocks
        // SIGCHLD (Foundation's, Dispatch's) would inherit the block, and a shell's `wait` then
        // never returns.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGCHLD, SIGPIPE, SIGINT, SIGTERM, SIGHUP] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let arguments = ["/bin/sh", "-c", script]
        var argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let result = posix_spawn(&pid, "/bin/sh", &actions, &attributes, &argv, environ)
        guard result == 0 else { throw Failure(description: "posix_spawn failed: \(result)") }
        return pid
    }

    /// Waits for a child and returns its exit status (or 128 + signal).
    package static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        if status & 0x7f == 0 { return (status >> 8) & 0xff }
        return 128 + (status & 0x7f)
    }

    /// Runs blocking work (a fixture's set-up: processes started and waited for, files through a
    /// FUSE mount) on a thread of its own, so that it never holds one of the cooperative pool's
    /// threads (two on a 2-core machine) while the rest of the suite runs.
    package static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await onThread(body).get()
    }

    /// Runs `body` on a new thread and hands back its result.
    private static func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: body()) }
        }
    }

    private static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async -> Result<T, any Error> {
        await onThread { Result { try body() } }
    }
}
