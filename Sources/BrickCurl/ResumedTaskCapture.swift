internal import CRuntimeHook
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Catches the jobs of tasks that a piece of the driver's safe-point work resumes, so that the
/// driver runs them itself, at the same safe point, instead of waking a thread of the global
/// concurrent executor for each. **Opt-in**
/// (`resumesTasksAtSafePoint`): it needs a process-wide hook.
///
/// A task awaiting a response in `value` (with no executor preference and no actor isolation)
/// is resumed onto the global concurrent executor: Dispatch wakes a pool thread, the task runs
/// there, and the request it sends next wakes the driver from `poll` again — two thread hand-offs
/// per request that the callback path, whose handlers run at the safe point, does not pay.
/// While ``collect(_:)`` runs its body on a thread, the runtime's enqueues to the global executor
/// *made by that thread* are handed to the caller instead; the driver runs each job at its safe
/// point, watched by the standby thread like any other safe-point work, through
/// `runSynchronously(on: globalConcurrentExecutor)` — so the task is on its own executor there and
/// no hop follows when it returns to its caller.
///
/// **The hook.** The catch goes through the Swift runtime's `swift_task_enqueueGlobal_hook`, a
/// single process-wide slot. ``install()`` stores ours there with one compare-and-exchange, and
/// only when the slot is empty: a hook another library installed first (SwiftNIO's executor
/// takeover, a test helper) is never replaced or bypassed — capture is then simply unavailable and
/// tasks hop as before. Once installed, ours stays for the life of the process (nothing can remove
/// a hook safely while jobs are being enqueued); every enqueue it does not catch goes straight to
/// the runtime, so the only effect on others is that the slot is taken: a library that later
/// installs its own with compare-and-exchange finds it occupied. It is installed only by toolchains
/// it was tested with (Swift 6.3); elsewhere ``install()`` returns `false`.
enum ResumedTaskCapture {
    typealias Enqueue = @convention(thin) (UnownedJob) -> Void
    typealias Hook = @convention(thin) (UnownedJob, Enqueue) -> Void

    /// Where a capturing thread's jobs go: its value is an `UnsafeMutablePointer<[UnownedJob]>`
    /// while ``collect(_:)`` runs on that thread, and nil otherwise.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "cannot create a thread-specific key")
        return key
    }()

    /// The runtime's hook slot, if this runtime has one.
    private static var slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>? {
        dlsym(nil, "swift_task_enqueueGlobal_hook")?.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
    }

    /// The one attempt to install the hook, made the first time a transport asks for it.
    private static let installation: Bool = {
        #if compiler(>=6.3) && compiler(<6.4)
        _ = key
        guard let slot else { return false }
        let hook: Hook = { job, enqueue in
            if let jobs = pthread_getspecific(ResumedTaskCapture.key) {
                jobs.assumingMemoryBound(to: [UnownedJob].self).pointee.append(job)
            } else {
                enqueue(job)
            }
        }
        return brick_hook_install_if_empty(slot, unsafeBitCast(hook, to: UnsafeMutableRawPointer.self)) != 0
        #else
        return false
        #endif
    }()

    /// Installs the hook if the slot is empty (once per process); returns whether capture works
    /// in this process — `false` when another hook was there first or the toolchain is not one it
    /// was tested with.
    static func install() -> Bool {
        installation
    }

    /// Runs `body` and returns the jobs it enqueued on the global concurrent executor from this
    /// thread, in order, instead of enqueuing them. The caller must run every one of them
    /// (``run(_:)``), or hand it on to the global executor. Only after ``install()`` returned
    /// `true` (a driver that captures: `capturesResumedTasks`).
    static func collect(_ body: () -> Void) -> [UnownedJob] {
        var jobs: [UnownedJob] = []
        withUnsafeMutablePointer(to: &jobs) { jobs in
            pthread_setspecific(key, jobs)
            body()
            pthread_setspecific(key, nil)
        }
        return jobs
    }

    /// Runs a caught job here, as if on the global concurrent executor: a task returning from
    /// `value` into a caller with no isolation of its own goes on on this thread.
    static func run(_ job: UnownedJob) {
        job.runSynchronously(on: globalConcurrentExecutor.asUnownedTaskExecutor())
    }
}
