import Glibc

/// Catches the jobs of tasks that a piece of the driver's safe-point work resumes, so that the
/// driver runs them itself, at the same safe point, instead of waking a thread of the global
/// concurrent executor for each.
///
/// A task awaiting a response in `value` (with no executor preference and no actor isolation)
/// is resumed onto the global concurrent executor: Dispatch wakes a pool thread, the task runs
/// there, and the request it sends next wakes the driver from `poll` again — two thread hand-offs
/// per request that the callback path, whose handlers run at the safe point, does not pay.
/// While ``collect(_:)`` runs its body on a thread, the runtime's enqueues to the global executor
/// *made by that thread* are handed to the caller instead; the driver runs each job at its safe
/// point, watched by the standby thread like any other safe-point work, through
/// `runSynchronously(on: globalConcurrentExecutor)` — so the task is on its own executor there and
/// no hop follows when it returns to its caller. The task runs until it next suspends (typically
/// in its next request, which then needs no wakeup), exactly like a `response(_:)` handler.
///
/// Only enqueues to the global executor are caught: a task isolated to an actor (`@MainActor`)
/// or preferring a task executor is resumed there as always. Enqueues on every other thread, and
/// on this one outside ``collect(_:)``, go on to the runtime (or to a hook installed before this
/// one). The catch goes through the Swift runtime's `swift_task_enqueueGlobal_hook`, installed
/// the first time it is needed; where the runtime has no such hook, ``collect(_:)`` just runs its
/// body and tasks hop as before.
enum ResumedTaskCapture {
    typealias Enqueue = @convention(thin) (UnownedJob) -> Void
    typealias Hook = @convention(thin) (UnownedJob, Enqueue) -> Void

    /// The hook chain: whether ours is installed, and the hook it replaced (called for every job
    /// it does not catch).
    private struct Chain {
        let installed: Bool
        let previous: Hook?
    }

    /// Where a capturing thread's jobs go: its value is an `UnsafeMutablePointer<[UnownedJob]>`
    /// while ``collect(_:)`` runs on that thread, and nil otherwise.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "cannot create a thread-specific key")
        return key
    }()

    private static let chain: Chain = {
        _ = key
        guard let symbol = dlsym(nil, "swift_task_enqueueGlobal_hook") else {
            return Chain(installed: false, previous: nil)
        }
        let slot = symbol.assumingMemoryBound(to: Hook?.self)
        let previous = slot.pointee
        slot.pointee = { job, enqueue in
            if let jobs = pthread_getspecific(ResumedTaskCapture.key) {
                jobs.assumingMemoryBound(to: [UnownedJob].self).pointee.append(job)
            } else if let previous = ResumedTaskCapture.chain.previous {
                previous(job, enqueue)
            } else {
                enqueue(job)
            }
        }
        return Chain(installed: true, previous: previous)
    }()

    /// Whether enqueues can be caught in this process.
    static var isAvailable: Bool { chain.installed }

    /// Runs `body` and returns the jobs it enqueued on the global concurrent executor from this
    /// thread, in order, instead of enqueuing them. The caller must run every one of them
    /// (``run(_:)``), or hand it on to the global executor.
    static func collect(_ body: () -> Void) -> [UnownedJob] {
        guard chain.installed else {
            body()
            return []
        }
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
