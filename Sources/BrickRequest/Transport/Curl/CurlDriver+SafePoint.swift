import Glibc
import Synchronization

// Safe-point work: what runs on the driver's thread between rounds of I/O, watched by the
// standby thread (see ``CurlDriver`` and ``Standby``).
extension CurlDriver {
    /// Runs `work` on the driver at its next safe point, watched by the standby thread. Only from
    /// the leader outside safe-point work (a completion); returns `false` elsewhere, or when
    /// ``CurlTransport/Configuration/stallLimit`` is zero.
    func scheduleAtSafePoint(_ work: SafePointWork) -> Bool {
        guard standby != nil, leaderThread.load(ordering: .relaxed) == pthread_self() else { return false }
        deferred.append(work)
        return true
    }

    /// Runs a task's job that arrived after the loop ended on the global concurrent executor, so
    /// the task is never stranded.
    static func runElsewhere(_ job: UnownedJob) {
        globalConcurrentExecutor.enqueue(ExecutorJob(job))
    }

    /// Runs the deferred work, each piece watched by the standby. Returns `false` when the lease
    /// was lost meanwhile: the rest of the work has then been handed to the new leader and this
    /// thread must not touch driver state again.
    func runSafePointWork() -> Bool {
        var items: [SafePointWork] = []
        swap(&items, &spareDeferred)
        swap(&items, &deferred)
        let executor = self.executor
        leaderThread.store(0, ordering: .relaxed)
        if let standby { standby.ensureAvailable { startThread(leading: false) } }
        var index = 0
        while index < items.count {
            workSequence = Standby.next(after: workSequence)
            let sequence = workSequence
            standby?.watch(sequence)
            // From here until `unwatch` succeeds, the lease may move: touch no driver state.
            if case .resumptions(let work) = items[index] {
                // The tasks it resumes run next, each watched on its own.
                for job in ResumedTaskCapture.collect(work) { items.append(.resumedTask(job)) }
            } else {
                Self.run(items[index], on: executor)
            }
            index += 1
            if let standby, !standby.unwatch(sequence) {
                // A standby took the I/O over while this work ran: the rest goes to it.
                while index < items.count {
                    submit(.safePoint(items[index]))
                    index += 1
                }
                return false
            }
        }
        items.removeAll(keepingCapacity: true)
        spareDeferred = items
        leaderThread.store(pthread_self(), ordering: .relaxed)
        return true
    }

    /// Runs one piece of safe-point work (with `executor` `nil` once the loop has ended: jobs then
    /// go to the global executor, and resumed tasks are not caught).
    static func run(_ work: SafePointWork, on executor: CurlTaskExecutor?) {
        switch work {
        case .work(let work), .resumptions(let work):
            work()
        case .job(let job):
            if let executor {
                job.runSynchronously(on: executor.asUnownedTaskExecutor())
            } else {
                Self.runElsewhere(job)
            }
        case .resumedTask(let job):
            if executor != nil {
                ResumedTaskCapture.run(job)
            } else {
                Self.runElsewhere(job)
            }
        }
    }
}
