import Glibc
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The safe-point work of one round, shared between the leader running it and a standby that
/// takes the I/O over: the standby takes what the leader has not started, at once, so that the rest
/// of a round never waits behind one piece of work that blocks.
struct SafePointRound {
    /// The round's work; `items[next...]` is not started yet.
    var items: [CurlDriver.SafePointWork] = []
    var next = 0
    /// Bumped at the start of every round, so that a demoted leader never touches a later one.
    var generation: UInt64 = 0
    /// Set when a new leader took what was left of this round.
    var taken = false

    /// The next piece of work of round `generation`, if it is still this thread's to run.
    mutating func take(in generation: UInt64) -> CurlDriver.SafePointWork? {
        guard generation == self.generation, !taken, next < items.count else { return nil }
        defer { next += 1 }
        return items[next]
    }

    /// Adds work to round `generation`, to run next; `false` when the round has moved to a new
    /// leader (or ended), and the work must follow it there.
    mutating func append(_ work: [CurlDriver.SafePointWork], in generation: UInt64) -> Bool {
        guard generation == self.generation, !taken else { return false }
        items.append(contentsOf: work)
        return true
    }
}

// Safe-point work: what runs on the driver's thread between rounds of I/O, watched by the
// standby thread (see ``CurlDriver`` and ``Standby``).
extension CurlDriver {
    /// Runs `work` on the driver at its next safe point, watched by the standby thread. Only from
    /// the leader outside safe-point work (a completion); returns `false` elsewhere, or when
    /// `stallLimit` is zero.
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
    /// was lost meanwhile: what was not started has then been taken by the new leader
    /// (``adoptAbandonedRound()``), and this thread must not touch driver state again.
    func runSafePointWork() -> Bool {
        let executor = self.executor
        let generation = round.withLock { round -> UInt64 in
            round.generation &+= 1
            round.taken = false
            round.next = 0
            swap(&round.items, &deferred)
            return round.generation
        }
        leaderThread.store(0, ordering: .relaxed)
        if let standby { standby.ensureAvailable { startThread(leading: false) } }
        while let item = round.withLock({ $0.take(in: generation) }) {
            workSequence = Standby.next(after: workSequence)
            let sequence = workSequence
            standby?.watch(sequence)
            // From here until `unwatch` succeeds, the lease may move: touch no driver state.
            if case .resumptions(let work) = item {
                // The tasks it resumes run next, each watched on its own.
                let jobs = ResumedTaskCapture.collect(work).map { SafePointWork.resumedTask($0) }
                let added = jobs.isEmpty || round.withLock { $0.append(jobs, in: generation) }
                // The round moved to a new leader meanwhile: the jobs follow it.
                if !added { for job in jobs { submit(.safePoint(job)) } }
            } else {
                Self.run(item, on: executor)
            }
            if let standby, !standby.unwatch(sequence) { return false }
        }
        round.withLock { round in
            round.items.removeAll(keepingCapacity: true)
            round.next = 0
            // The emptied buffer becomes the next `deferred`, keeping its capacity.
            if deferred.isEmpty { swap(&round.items, &deferred) }
        }
        leaderThread.store(pthread_self(), ordering: .relaxed)
        return true
    }

    /// A thread that just took the lease over takes the work its predecessor's round had not
    /// started, to run at its own first safe point, before anything newer.
    func adoptAbandonedRound() {
        round.withLock { round in
            round.taken = true
            if round.next < round.items.count {
                deferred.insert(contentsOf: round.items[round.next...], at: 0)
            }
            // What was started is done (or still running on the old leader): none of it stays.
            round.items.removeAll()
            round.next = 0
        }
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
