import Synchronization

#if BRICK_SANITIZER_LOCKS
import Glibc

/// The lock of every piece of shared state in BrickRequest, in a ThreadSanitizer run: a
/// `pthread_mutex_t`, which TSan understands (it does not see `Synchronization.Mutex` on Linux,
/// and reports every hand-off through one as a race). Chosen with
/// `swift test --sanitize=thread -Xswiftc -DBRICK_SANITIZER_LOCKS`; ordinary builds use `Mutex`.
package final class Lock<Value>: @unchecked Sendable {  // one pthread mutex guards `value`
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    /// A lock guarding `value`.
    package init(_ value: sending Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, the lock held.
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
#else
/// The lock of every piece of shared state in BrickRequest: `Synchronization.Mutex`. (A
/// ThreadSanitizer run swaps in a `pthread_mutex_t`, which TSan can see: define
/// `BRICK_SANITIZER_LOCKS`.)
package typealias Lock<Value: ~Copyable> = Mutex<Value>
#endif
