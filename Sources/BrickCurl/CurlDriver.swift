internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The thread that owns a `curl_multi` handle and every easy handle attached to it.
///
/// Loop: drain the inbox (start, cancel) → run safe-point work → `curl_multi_perform` →
/// `curl_multi_info_read` → `curl_multi_poll`. Other threads append to the inbox under a lock and
/// call `curl_multi_wakeup` only when the driver is asleep in `curl_multi_poll`; submissions made
/// by the driver itself (from a completion) skip the lock and the wakeup.
///
/// **Leader and standby.** "The driver" is a role, not a thread: whichever thread holds the lease
/// (the *leader*) runs the loop. Work that may block — a session's handler drain
/// (``scheduleAtSafePoint(_:)``), a job of ``CurlTransport/taskExecutor`` — runs on the leader at
/// its safe point, where no curl call is in progress, under a watch that a *standby* thread checks
/// every `stallLimit`. Work still running at two consecutive checks
/// loses the lease: the standby becomes the leader and carries on with the I/O, and the old leader
/// finishes its work and becomes the standby (or exits when there already is one). The lease
/// changes hands through one atomic compare-and-exchange (acquire/release), so the driver state is
/// handed over complete; the old leader touches none of it afterwards.
///
/// `@unchecked Sendable`: `inbox` is guarded by its lock and the diagnostic counts are atomics;
/// the multi handle, the easy handles and every other mutable field are touched only by the thread
/// holding the lease (`curl_multi_wakeup`, documented as callable from any thread, is the one
/// exception).
final class CurlDriver: @unchecked Sendable {  // inbox under its lock, counts atomic; the rest by the lease holder only
    enum Command {
        case start(Transfer)
        case cancel(Transfer)
        /// The transfer's stream wants its body again after pausing it.
        case resumeDelivery(Transfer)
        /// The transfer's streamed request body has bytes again after the reader paused.
        case resumeUpload(Transfer)
        /// A job of a task that prefers ``CurlTransport/taskExecutor``.
        case job(UnownedJob)
        /// The network changed: stop reusing the connections opened so far.
        case networkChanged
        /// Safe-point work handed back by a leader that lost the lease before running it.
        case safePoint(SafePointWork)
        /// Read or clear the cookie store, on the driver (libcurl's cookie data is the driver's).
        case cookies(CookieOperation)
        /// Count the connections by destination, on the driver.
        case connectionCounts(@Sendable ([CurlTransport.HostConnections]) -> Void)
        case shutdown
    }

    /// Work run at the safe point, watched by the standby thread. An enum of fixed size (no
    /// existential box), so a round's work is one contiguous array with no allocation per item.
    enum SafePointWork {
        case work(@Sendable () -> Void)
        /// Work that resumes awaiting tasks: those it resumes onto the global executor run here
        /// next, each as a `.resumedTask` of its own (``ResumedTaskCapture``).
        case resumptions(@Sendable () -> Void)
        /// A job of a task that prefers ``CurlTransport/taskExecutor``.
        case job(UnownedJob)
        /// A job caught on its way to the global executor, run here as if there.
        case resumedTask(UnownedJob)
    }

    struct Inbox {
        var commands: [Command] = []
        var sleeping = false
        /// Set once the loop has ended: later jobs go to the global executor instead.
        var stopped = false
    }

    /// Counts for tests and diagnostics, each read on its own (relaxed: no ordering is implied).
    struct Statistics: ~Copyable {
        let activeTransfers = Atomic<Int>(0)
        let easyHandles = Atomic<Int>(0)
        let takeovers = Atomic<Int>(0)
    }

    let inbox = Lock(Inbox())
    /// Bumped after every submission from another thread: what the driver watches while it spins.
    let submissions = Atomic<UInt64>(0)
    /// `handOffSpin` in nanoseconds.
    let spinNanoseconds: UInt64
    /// ``CurlTransport/Configuration/idleTimeout`` in nanoseconds (0: none), how often transfers
    /// are checked against it, and the longest sleep in `curl_multi_poll` that keeps that pace.
    let idleNanoseconds: UInt64
    let idleCheckNanoseconds: UInt64
    let pollMilliseconds: Int32
    /// Bytes a transfer must move per idle timeout not to be idle (``CurlTransport/Configuration/idleMinimumBytes``).
    let idleMinimumBytes: Int64
    let multi: UnsafeMutableRawPointer
    let configuration: CurlTransport.Configuration
    /// Whether tasks resumed at the safe point go on there: asked for
    /// (`resumesTasksAtSafePoint`) and the hook installed.
    let capturesResumedTasks: Bool
    /// C strings set on every transfer, converted once (libcurl copies them).
    let constantStrings: ConstantStrings
    let statistics = Statistics()
    /// Runs tasks on this thread (``CurlTransport/taskExecutor``). Created before the thread starts,
    /// then read only there; dropped when the loop ends, which breaks the driver ⇄ executor cycle.
    @exclusivity(unchecked) var executor: CurlTaskExecutor?

    /// The leader's `pthread_t` while it may take submissions without the lock; 0 while it runs
    /// safe-point work (whose submissions go through the inbox: the lease may move meanwhile).
    let leaderThread = Atomic<UInt>(0)
    /// The standby thread's bookkeeping; `nil` when `stallLimit` is
    /// zero (safe-point work then runs unwatched and handler drains are not scheduled here).
    let standby: Standby?

    // Driver state. Unchecked exclusivity: only the lease holder touches it, so the runtime's
    // exclusivity checks on every access would only cost time.
    @exclusivity(unchecked) var local: [Command] = []
    @exclusivity(unchecked) var drained: [Command] = []
    @exclusivity(unchecked) var active: [Transfer] = []
    @exclusivity(unchecked) var idleHandles: [EasyHandle] = []
    @exclusivity(unchecked) var easyHandleCount = 0
    @exclusivity(unchecked) var running = true
    /// When the network last changed (``monotonicNanoseconds()``), or `nil` if it has not.
    @exclusivity(unchecked) var networkChangedAt: UInt64?
    /// `host:port` of names whose addresses failed to connect: their entries in libcurl's DNS
    /// cache are dropped before the next transfer to them (see ``forgetAddresses(after:code:connected:)``).
    @exclusivity(unchecked) var forgottenNames: [String] = []
    /// Safe-point work waiting for the next safe point.
    @exclusivity(unchecked) var deferred: [SafePointWork] = []
    /// The round of safe-point work being run, shared with a standby that takes the I/O over.
    let round = Lock(SafePointRound())
    @exclusivity(unchecked) var workSequence: UInt64 = 0
    /// When active transfers are next checked for idleness (``monotonicNanoseconds()``).
    @exclusivity(unchecked) var nextIdleCheck: UInt64 = 0
    /// The cookie store every easy handle shares, with ``Configuration/storesCookies``. Used only
    /// by the lease holder, one thread at a time, so libcurl needs no lock callbacks for it.
    let cookieShare: UnsafeMutableRawPointer?
    /// A handle that is never sent, through which the cookie store is read and cleared.
    @exclusivity(unchecked) var cookieHandle: EasyHandle?
    /// The sockets of libcurl's connections, to check a reused one for leftover bytes.
    @exclusivity(unchecked) var connections = ConnectionRegistry()
    /// Whether requests are checked before going out on a reused connection (libcurl 7.80 or
    /// later, and TCP: see ``ConnectionRegistry``).
    let checksReusedConnections: Bool
    /// The proxies requests go through, for the egress policy's check.
    let resolvedProxy: ResolvedProxy

    init(configuration: CurlTransport.Configuration, proxy: ResolvedProxy) {
        CurlGlobal.initialize()
        self.configuration = configuration
        self.resolvedProxy = proxy
        if configuration.storesCookies, let share = curl_share_init() {
            _ = ccurl_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_COOKIE.rawValue))
            cookieShare = share
        } else {
            cookieShare = nil
        }
        self.checksReusedConnections = configuration.unixSocketPath == nil && ccurl_version_num() >= 0x07_50_00
        self.constantStrings = ConstantStrings(
            proxy: proxy,
            userAgent: configuration.userAgent,
            hostOverrides: configuration.hostOverrides
        )
        self.spinNanoseconds = configuration.handOffSpin.nanoseconds(atMostSeconds: 1)
        // Checked about four times per timeout, at most once a second and at least every 10 ms.
        let idle = configuration.idleTimeout.map { max($0.nanoseconds(atMostSeconds: 1 << 30), 1) } ?? 0
        self.idleNanoseconds = idle
        self.idleMinimumBytes = Int64(max(configuration.idleMinimumBytes, 1))
        self.idleCheckNanoseconds = min(max(idle / 4, 10_000_000), 1_000_000_000)
        self.pollMilliseconds = idle > 0 ? Int32(idleCheckNanoseconds / 1_000_000) : 1000
        let limit = configuration.stallLimit.nanoseconds(atMostSeconds: 10)
        self.standby = limit > 0 ? Standby(tickNanoseconds: max(limit, 100_000)) : nil
        self.capturesResumedTasks = configuration.resumesTasksAtSafePoint && limit > 0 && ResumedTaskCapture.install()
        self.multi = curl_multi_init()!
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_PIPELINING, 2 /* CURLPIPE_MULTIPLEX */)
        if let max = configuration.maxConnections {
            _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, max)
            // The connection cache (in use and idle) is as large as the limit: libcurl's default
            // keeps 4 per easy handle ever added, hundreds of idle sockets after a burst.
            _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, max)
        }
        if let max = configuration.maxConnectionsPerHost {
            _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, max)
        }
        executor = CurlTaskExecutor(driver: self)
        let started = startThread(leading: true)
        precondition(started, "cannot start the curl driver thread")
    }

    /// Starts a thread that begins as the leader (the first one) or as the standby.
    func startThread(leading: Bool) -> Bool {
        DetachedThread.start(name: "brick-curl") { self.threadMain(leading: leading) } == 0
    }

    // MARK: - Submitting (any thread)

    func submit(_ command: consuming Command) {
        // After the loop stopped, even the driver thread goes through the inbox, which forwards
        // jobs (tasks resumed by the shutdown's completions) elsewhere. A start cannot arrive then:
        // the loop stops only when the last `CurlTransport` reference is gone.
        if leaderThread.load(ordering: .relaxed) == pthread_self() && running {
            local.append(command)
            return
        }
        // Moved into the inbox, not copied.
        var pending = Optional(command)
        let wake = inbox.withLock { inbox -> Bool? in
            if inbox.stopped { return nil }
            inbox.commands.append(pending.take().unsafelyUnwrapped)
            defer { inbox.sleeping = false }
            return inbox.sleeping
        }
        guard let wake else {
            // The loop has ended: jobs and safe-point work still need somewhere to run (work handed
            // back by a leader that lost the lease just before the end runs here, on its thread).
            switch pending.take() {
            case .job(let job)?: Self.runElsewhere(job)
            case .safePoint(let work)?: Self.run(work, on: nil)
            default: break
            }
            return
        }
        submissions.add(1, ordering: .releasing)
        if wake { curl_multi_wakeup(multi) }
    }

    // MARK: - Threads: leader and standby

    /// A thread's life: lead until the loop ends or the lease is lost, then stand by (when no other
    /// thread does) until taking the lease over.
    func threadMain(leading: Bool) {
        var leading = leading
        while true {
            if leading {
                leaderThread.store(pthread_self(), ordering: .relaxed)
                guard lead() == .demoted, let standby else { return }
                // The lease moved on while this thread ran safe-point work, which is now done.
                guard standby.enlist() else { return }
            }
            guard let standby, standby.awaitTakeover() else { return }
            statistics.takeovers.add(1, ordering: .relaxed)
            adoptAbandonedRound()
            leading = true
        }
    }

    enum LeadEnd { case stopped, demoted }

    /// The loop, run by the lease holder.
    func lead() -> LeadEnd {
        var runningHandles: Int32 = 0
        while running {
            processCommands()
            if !running { break }
            if !deferred.isEmpty {
                guard runSafePointWork() else { return .demoted }
                continue
            }
            curl_multi_perform(multi, &runningHandles)
            var handedOff = readCompletions()
            if idleNanoseconds > 0 && !active.isEmpty { handedOff = failIdleTransfers() || handedOff }
            if !local.isEmpty || !deferred.isEmpty { continue }
            if handedOff && active.isEmpty && spinNanoseconds > 0 && awaitFollowUp() { continue }
            let sleep = inbox.withLock { inbox -> Bool in
                if inbox.commands.isEmpty {
                    inbox.sleeping = true
                    return true
                }
                return false
            }
            if sleep {
                if active.isEmpty && idleHandles.count > configuration.maxIdleHandles {
                    trimIdleHandles()
                    publishStatistics()
                }
                curl_multi_poll(multi, nil, 0, pollMilliseconds, nil)
                inbox.withLock { $0.sleeping = false }
            }
        }
        tearDown()
        return .stopped
    }

    func processCommands() {
        // Local first: a start submitted on this thread always precedes a cancel from elsewhere.
        while !local.isEmpty {
            swap(&local, &drained)
            handleDrained()
        }
        inbox.withLock { swap(&$0.commands, &drained) }
        handleDrained()
        while !local.isEmpty {
            swap(&local, &drained)
            handleDrained()
        }
    }

    /// Handles the commands in `drained`, in order, and empties it. Each command is borrowed where
    /// it lies (iterating `for command in drained` would copy each one); handling one appends only
    /// to `local`, never to `drained`.
    func handleDrained() {
        for index in drained.indices { handle(drained[index]) }
        drained.removeAll(keepingCapacity: true)
    }

    func handle(_ command: Command) {
        switch command {
        case .start(let transfer):
            guard transfer.state == .pending else { return }
            begin(transfer)
        case .cancel(let transfer):
            switch transfer.state {
            case .done:
                return
            case .pending:
                transfer.state = .done
                transfer.completion(.failure(TransportError(.cancelled, message: "cancelled before it started")))
            case .active:
                let sent = transfer.easy?.sentRequestBytes ?? false
                finish(transfer, .failure(TransportError(.cancelled, message: "cancelled", requestBytesSent: sent)))
            }
        case .resumeDelivery(let transfer):
            resumeDelivery(transfer)
        case .resumeUpload(let transfer):
            resumeUpload(transfer)
        case .job(let job):
            if standby != nil {
                deferred.append(.job(job))
            } else if let executor {
                job.runSynchronously(on: executor.asUnownedTaskExecutor())
            } else {
                Self.runElsewhere(job)
            }
        case .safePoint(let work):
            deferred.append(work)
        case .networkChanged:
            networkChangedAt = Self.monotonicNanoseconds()
        case .cookies(let operation):
            run(operation)
        case .connectionCounts(let answer):
            answer(connectionCounts())
        case .shutdown:
            running = false
        }
    }

    /// Delivers finished transfers; returns whether any completion ran (with no follow-up in
    /// `local`, its code probably handed the outcome to another thread).
    func readCompletions() -> Bool {
        var remaining: Int32 = 0
        var delivered = false
        while let message = curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE else { continue }
            let code = message.pointee.data.result
            var privateData: UnsafeMutableRawPointer? = nil
            _ = ccurl_easy_getinfo_ptr(message.pointee.easy_handle, CURLINFO_PRIVATE, &privateData)
            let transfer = Transfer.from(cell: privateData)
            completed(transfer, code: code)
            delivered = true
        }
        return delivered
    }

    /// With nothing in flight after handing completions off, waits up to ``spinNanoseconds`` for
    /// another thread to submit the follow-up request, so that it needs no `curl_multi_wakeup`.
    /// Returns whether a submission arrived.
    func awaitFollowUp() -> Bool {
        let seen = submissions.load(ordering: .acquiring)
        let deadline = Self.monotonicNanoseconds() &+ spinNanoseconds
        while true {
            for _ in 0..<32 {
                if submissions.load(ordering: .acquiring) != seen { return true }
                ccurl_cpu_relax()
            }
            if Self.monotonicNanoseconds() >= deadline { return false }
        }
    }

    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }

}
