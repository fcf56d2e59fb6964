import Glibc

/// Starts detached POSIX threads (what `Foundation.Thread` would do, without Foundation).
enum DetachedThread {
    private final class Start {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Runs `body` on a new detached thread. Returns `false` when the thread could not be
    /// created; `body` is then not run.
    static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let start = Unmanaged.passRetained(Start(body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(
            &thread,
            nil,
            { argument in
                let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
                start.body()
                return nil
            },
            start
        )
        guard result == 0 else {
            Unmanaged<Start>.fromOpaque(start).release()
            return false
        }
        pthread_detach(thread)
        return true
    }
}
