import Foundation
import Synchronization
import Testing

/// Watches Swift's cooperative thread pool from a thread of its own while the tests run, and fails
/// the run when a test *blocks* the pool (a synchronous wait on a cooperative thread: a semaphore,
/// a `usleep` loop, a child's pipe, a fixture started inside a lazy initialiser).
///
/// On Linux the pool has as many threads as cores (two on CI's machines) and never adds one for a
/// thread that blocks: two blocked threads stop every test of the process. That was the "pool
/// stall" of loaded runs: a fixture's start held one thread, a polling loop the other, for half a
/// minute, and every ms-long test around them missed its time limit.
///
/// Started once per test process by the support functions most tests go through (`withServer`,
/// `poll`/`eventually`, the PostgreSQL fixture). Every 250 ms it enqueues a probe task; a probe not
/// run for ``stallBound`` is a stall, reported on stderr with the pool's threads and those that ran.
/// A stall is a *block* when, for ``blockBound``, no pool thread runs or is runnable (state `R`) and
/// one waits in a call that is not the pool's own idle wait (Dispatch's idle workers wait on a futex
/// *with* a timeout; a test's semaphore, sleep, pipe or disk wait is anything else): then the stacks
/// of the threads running a task (from gdb, when installed) name the test, and an issue is
/// recorded, which fails the run. A pool merely starved by a loaded machine (its threads runnable)
/// is reported, never failed. Pool threads are Dispatch's `…default-qos` workers (threads started
/// from one inherit the name; they count as waiting too, which only ever delays a verdict).
///
/// `BRICK_POOL_WATCHDOG=0` turns it off.
package enum PoolWatchdog {
    /// How long the pool may leave a probe task unrun before the watchdog reports a stall.
    package static let stallBound: Duration = .seconds(3)
    /// How long every pool thread may wait (not run) during a stall before it is a block.
    package static let blockBound: Duration = .seconds(5)

    /// Starts the watchdog once; later calls do nothing. Cheap enough to call from every test.
    package static func start() {
        _ = started
    }

    private static let started: Bool = {
        guard ProcessInfo.processInfo.environment["BRICK_POOL_WATCHDOG"] != "0" else { return false }
        Thread.detachNewThread { watch() }
        return true
    }()

    private static let lastProbe = Mutex(ContinuousClock.now)

    /// The kernel's ID of the calling thread (`/proc/thread-self` is `PID/task/TID`).
    private static func currentThreadID() -> String {
        let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
        return link.split(separator: "/").last.map(String.init) ?? ""
    }

    private static func watch() {
        let clock = ContinuousClock()
        let began = clock.now
        let own = currentThreadID()
        var stallStarted: ContinuousClock.Instant?
        var blockedSince: ContinuousClock.Instant?
        var blockReported = false
        var previousTimes = threadTimes()
        while true {
            Thread.sleep(forTimeInterval: 0.25)
            Task.detached { lastProbe.withLock { $0 = clock.now } }
            let now = clock.now
            let sinceProbe = now - lastProbe.withLock { $0 }
            let times = threadTimes()
            if sinceProbe > stallBound {
                if stallStarted == nil {
                    stallStarted = now - sinceProbe
                    write(report("at \(now - began): the cooperative pool has run no new task for \(sinceProbe)", previous: previousTimes, current: times))
                }
                // No pool thread runs or is runnable, and one waits in something else than the
                // pool's idle wait.
                let pool = threadIDs().filter { $0 != own && read($0, "comm").hasSuffix("default-qos") }
                let states = pool.map { (thread: $0, state: state(of: $0)) }
                let blocked = states.filter { $0.state == "D" || ($0.state == "S" && !isIdleWait($0.thread)) }
                if states.contains(where: { $0.state == "R" }) || blocked.isEmpty {
                    blockedSince = nil
                } else if blockedSince == nil {
                    blockedSince = now
                } else if let since = blockedSince, now - since >= blockBound, !blockReported {
                    blockReported = true
                    reportBlock(blocked.map { $0.thread }, for: now - since, at: now - began)
                }
            } else if sinceProbe < .seconds(1), let started = stallStarted {
                stallStarted = nil
                blockedSince = nil
                blockReported = false
                write("PoolWatchdog: at \(now - began): the pool runs again after a stall of \(now - started)\n")
            }
            previousTimes = times
        }
    }

    /// No pool thread ran through `duration` of a stall, `blocked` waited: the stacks of the threads
    /// running a task, and an issue.
    private static func reportBlock(_ blocked: [String], for duration: Duration, at time: Duration) {
        let threads = blocked.map { "\($0) (\(read($0, "wchan")), syscall \(syscallNumber(of: $0)))" }
        var text = "PoolWatchdog: BLOCKED at \(time): every thread of the cooperative pool has waited for \(duration) "
            + "while tasks were queued — a synchronous wait on a cooperative thread: \(threads.joined(separator: ", "))\n"
        text += taskStacks()
        write(text)
        Issue.record(
            """
            the cooperative pool was blocked for \(duration): every one of its threads waited in a synchronous call \
            (stacks on stderr, "PoolWatchdog: BLOCKED"); wait with `await`, or on a thread of its own (Subprocess.offPool)
            """
        )
    }

    /// The stacks of the threads running a task (`swift_job_run` on their stack), from gdb (which
    /// stops the process while it reads them), or why there are none.
    private static func taskStacks() -> String {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb") else {
            return "PoolWatchdog: no stacks: gdb is not installed (apt-get install gdb)\n"
        }
        // Into a file, read once gdb is gone: through a pipe, gdb would block on the full pipe while
        // its reader — a thread of this process — is stopped by gdb.
        let path = NSTemporaryDirectory() + "brick-pool-stacks-\(getpid())-\(UUID().uuidString).txt"
        defer { try? FileManager.default.removeItem(atPath: path) }
        _ = try? Subprocess.runBlocking(
            "timeout -k 10 120 gdb -p \(getpid()) -batch -ex 'set pagination off' -ex 'thread apply all bt 40' > '\(path)' 2>/dev/null"
        )
        guard let all = try? String(contentsOfFile: path, encoding: .utf8), all.contains("(LWP ") else {
            return "PoolWatchdog: no stacks: gdb failed\n"
        }
        let running = all.components(separatedBy: "\nThread ").filter { $0.contains("swift_job_run") }
        let frames = running.map { block in
            block.split(separator: "\n").filter { $0.hasPrefix("#") || $0.contains("(LWP ") }
                .map { "  " + $0.prefix(220) }.joined(separator: "\n")
        }
        return "PoolWatchdog: stacks of the threads running a task:\n" + frames.joined(separator: "\n") + "\n"
    }

    /// Whether `thread` waits where Dispatch's idle workers wait: a futex with a timeout (a test's
    /// semaphore or lock waits without one).
    private static func isIdleWait(_ thread: String) -> Bool {
        let fields = read(thread, "syscall").split(separator: " ")
        return fields.count > 4 && fields[0] == "202" && fields[4] != "0x0"
    }

    /// CPU ticks (user + system) of each thread of this process, by thread ID.
    private static func threadTimes() -> [String: Int] {
        var times: [String: Int] = [:]
        for thread in threadIDs() {
            guard let fields = statFields(thread), fields.count > 12 else { continue }
            times[thread] = (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
        }
        return times
    }

    private static func threadIDs() -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    }

    /// The fields of /proc/self/task/TID/stat after the name (which may hold spaces): state first.
    private static func statFields(_ thread: String) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/self/task/\(thread)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ")
    }

    private static func state(of thread: String) -> String {
        statFields(thread)?.first.map(String.init) ?? "?"
    }

    private static func syscallNumber(of thread: String) -> String {
        read(thread, "syscall").split(separator: " ").first.map(String.init) ?? "?"
    }

    private static func read(_ thread: String, _ file: String) -> String {
        let text = (try? String(contentsOfFile: "/proc/self/task/\(thread)/\(file)", encoding: .utf8)) ?? "?"
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The load, the threads by state, and the pool's threads and those that ran in the last 250 ms:
/// name, state, kernel wait, syscall, CPU ticks.
    private static func report(_ headline: String, previous: [String: Int], current: [String: Int]) -> String {
        let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        var lines = ["PoolWatchdog: \(headline); load \(load); threads (id name state wait syscall cpu-ticks, * = pool):"]
        var byState: [String: Int] = [:]
        for thread in threadIDs().sorted(by: { (Int($0) ?? 0) < (Int($1) ?? 0) }) {
            let state = state(of: thread)
            byState[state, default: 0] += 1
            let ticks = (current[thread] ?? 0) - (previous[thread] ?? 0)
            let inPool = read(thread, "comm").hasSuffix("default-qos")
            // The pool's threads, and those that ran (the rest wait: event loops, idle transports).
            guard inPool || ticks > 0 else { continue }
            let mark = inPool ? "*" : " "
            lines.append("  \(mark)\(thread) \(read(thread, "comm")) \(state) \(read(thread, "wchan")) \(syscallNumber(of: thread)) \(ticks)")
        }
        let states = byState.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        lines.append("PoolWatchdog: threads by state: \(states)")
        return lines.joined(separator: "\n") + "\n"
    }

    private static func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}
