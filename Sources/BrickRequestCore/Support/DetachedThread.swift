import Glibc

/// Starts detached, named POSIX threads (what `Foundation.Thread` would do, without Foundation).
package enum DetachedThread {
    private final class Start {
        let name: String
        let body: () -> Void
        init(_ name: String, _ body: @escaping () -> Void) { (self.name, self.body) = (name, body) }
    }

    /// Runs `body` on a new detached thread called `name` (what `top -H`, `ps -L` and debuggers
    /// show; the kernel keeps the first 15 bytes). Returns 0 when the thread started, otherwise
    /// `pthread_create`'s error number (`EAGAIN`, `EPERM`, …); `body` is then not run.
    package static func start(name: String, _ body: @escaping @Sendable () -> Void) -> Int32 {
        let start = Unmanaged.passRetained(Start(name, body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(
            &thread,
            nil,
            { argument in
                let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
                DetachedThread.nameCurrentThread(start.name)
                start.body()
                return nil
            },
            start
        )
        guard result == 0 else {
            Unmanaged<Start>.fromOpaque(start).release()
            return result
        }
        pthread_detach(thread)
        return 0
    }

    /// Names the calling thread through procfs (`pthread_setname_np` is not visible through the
    /// `Glibc` module). Best effort: without `/proc` the thread keeps its inherited name.
    private static func nameCurrentThread(_ name: String) {
        let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }
}
