internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization

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
/// every ``CurlTransport/Configuration/stallLimit``. Work still running at two consecutive checks
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
        /// A job of a task that prefers ``CurlTransport/taskExecutor``.
        case job(UnownedJob)
        /// The network changed: stop reusing the connections opened so far.
        case networkChanged
        /// Safe-point work handed back by a leader that lost the lease before running it.
        case safePoint(SafePointWork)
        /// Read or clear the cookie store, on the driver (libcurl's cookie data is the driver's).
        case cookies(CookieOperation)
        case shutdown
    }

    /// What to do with the cookie store; each case gets its answer through its closure.
    enum CookieOperation {
        /// The cookies as libcurl's Netscape-format lines.
        case list(@Sendable ([String]) -> Void)
        case removeAll(@Sendable () -> Void)
    }

    /// Work run at the safe point, watched by the standby thread. Fixed layout (perf rule 3).
    enum SafePointWork {
        case work(@Sendable () -> Void)
        case job(UnownedJob)
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

    private let inbox = Lock(Inbox())
    /// Bumped after every submission from another thread: what the driver watches while it spins.
    private let submissions = Atomic<UInt64>(0)
    /// ``CurlTransport/Configuration/handOffSpin`` in nanoseconds.
    private let spinNanoseconds: UInt64
    /// ``CurlTransport/Configuration/idleTimeout`` in nanoseconds (0: none), how often transfers
    /// are checked against it, and the longest sleep in `curl_multi_poll` that keeps that pace.
    private let idleNanoseconds: UInt64
    private let idleCheckNanoseconds: UInt64
    private let pollMilliseconds: Int32
    private let multi: UnsafeMutableRawPointer
    private let configuration: CurlTransport.Configuration
    /// C strings set on every transfer, converted once (libcurl copies them).
    private let constantStrings: ConstantStrings
    let statistics = Statistics()
    /// Runs tasks on this thread (``CurlTransport/taskExecutor``). Created before the thread starts,
    /// then read only there; dropped when the loop ends, which breaks the driver ⇄ executor cycle.
    @exclusivity(unchecked) private(set) var executor: CurlTaskExecutor?

    /// The leader's `pthread_t` while it may take submissions without the lock; 0 while it runs
    /// safe-point work (whose submissions go through the inbox: the lease may move meanwhile).
    private let leaderThread = Atomic<UInt>(0)
    /// The standby thread's bookkeeping; `nil` when ``CurlTransport/Configuration/stallLimit`` is
    /// zero (safe-point work then runs unwatched and handler drains are not scheduled here).
    private let standby: Standby?

    // Driver state. Unchecked exclusivity: only the lease holder touches it (perf rule 3).
    @exclusivity(unchecked) private var local: [Command] = []
    @exclusivity(unchecked) private var drained: [Command] = []
    @exclusivity(unchecked) private var active: [Transfer] = []
    @exclusivity(unchecked) private var idleHandles: [EasyHandle] = []
    @exclusivity(unchecked) private var easyHandleCount = 0
    @exclusivity(unchecked) private var running = true
    /// When the network last changed (``monotonicNanoseconds()``), or `nil` if it has not.
    @exclusivity(unchecked) private var networkChangedAt: UInt64?
    /// Safe-point work waiting for the next safe point, and the spare buffer it is swapped with.
    @exclusivity(unchecked) private var deferred: [SafePointWork] = []
    @exclusivity(unchecked) private var spareDeferred: [SafePointWork] = []
    @exclusivity(unchecked) private var workSequence: UInt64 = 0
    /// When active transfers are next checked for idleness (``monotonicNanoseconds()``).
    @exclusivity(unchecked) private var nextIdleCheck: UInt64 = 0
    /// The cookie store every easy handle shares, with ``Configuration/storesCookies``. Used only
    /// by the lease holder, one thread at a time, so libcurl needs no lock callbacks for it.
    private let cookieShare: UnsafeMutableRawPointer?
    /// A handle that is never sent, through which the cookie store is read and cleared.
    @exclusivity(unchecked) private var cookieHandle: EasyHandle?
    /// The sockets of libcurl's connections, to check a reused one for leftover bytes.
    @exclusivity(unchecked) var connections = ConnectionRegistry()
    /// Whether requests are checked before going out on a reused connection (libcurl 7.80 or
    /// later, and TCP: see ``ConnectionRegistry``).
    private let checksReusedConnections: Bool

    init(configuration: CurlTransport.Configuration, proxy: ResolvedProxy) {
        CurlGlobal.initialize()
        self.configuration = configuration
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
        self.idleCheckNanoseconds = min(max(idle / 4, 10_000_000), 1_000_000_000)
        self.pollMilliseconds = idle > 0 ? Int32(idleCheckNanoseconds / 1_000_000) : 1000
        let limit = configuration.stallLimit.nanoseconds(atMostSeconds: 10)
        self.standby = limit > 0 ? Standby(tickNanoseconds: max(limit, 100_000)) : nil
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
    private func startThread(leading: Bool) -> Bool {
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

    /// Runs `work` on the driver at its next safe point, watched by the standby thread. Only from
    /// the leader outside safe-point work (a completion); returns `false` elsewhere, or when
    /// ``CurlTransport/Configuration/stallLimit`` is zero.
    func scheduleAtSafePoint(_ work: @escaping @Sendable () -> Void) -> Bool {
        guard standby != nil, leaderThread.load(ordering: .relaxed) == pthread_self() else { return false }
        deferred.append(.work(work))
        return true
    }

    /// Runs a task's job that arrived after the loop ended on the global concurrent executor, so
    /// the task is never stranded.
    private static func runElsewhere(_ job: UnownedJob) {
        globalConcurrentExecutor.enqueue(ExecutorJob(job))
    }

    // MARK: - Threads: leader and standby

    /// A thread's life: lead until the loop ends or the lease is lost, then stand by (when no other
    /// thread does) until taking the lease over.
    private func threadMain(leading: Bool) {
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
            leading = true
        }
    }

    private enum LeadEnd { case stopped, demoted }

    /// The loop, run by the lease holder.
    private func lead() -> LeadEnd {
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

    /// Runs the deferred work, each piece watched by the standby. Returns `false` when the lease
    /// was lost meanwhile: the rest of the work has then been handed to the new leader and this
    /// thread must not touch driver state again.
    private func runSafePointWork() -> Bool {
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
            Self.run(items[index], on: executor)
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

    private static func run(_ work: SafePointWork, on executor: CurlTaskExecutor?) {
        switch work {
        case .work(let work):
            work()
        case .job(let job):
            if let executor {
                job.runSynchronously(on: executor.asUnownedTaskExecutor())
            } else {
                Self.runElsewhere(job)
            }
        }
    }

    private func processCommands() {
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
    private func handleDrained() {
        for index in drained.indices { handle(drained[index]) }
        drained.removeAll(keepingCapacity: true)
    }

    private func handle(_ command: Command) {
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
        case .shutdown:
            running = false
        }
    }

    /// Lets a paused stream's body flow again (libcurl delivers what it held back first, from
    /// inside `curl_easy_pause`).
    private func resumeDelivery(_ transfer: Transfer) {
        guard transfer.state == .active, let easy = transfer.easy, transfer.streamPaused else { return }
        transfer.streamPaused = false
        guard transfer.receivePaused else { return }
        transfer.receivePaused = false
        let code = curl_easy_pause(easy.raw, ccurl_pause_continue())
        if code != CURLE_OK, transfer.state == .active {
            finish(transfer, .failure(CurlErrorMapping.error(code: code, easy: easy, transfer: transfer)))
        }
    }

    /// The check before a request goes out (`CURLOPT_PREREQFUNCTION`): on a reused HTTP/1.x
    /// connection with input waiting, returns `false` and marks the transfer to start again on a
    /// new connection (see ``ConnectionRegistry``).
    func mayUseConnection(
        for transfer: Transfer,
        remoteAddress: UnsafePointer<CChar>?,
        remotePort: Int,
        localPort: Int
    ) -> Bool {
        guard let easy = transfer.easy, let remoteAddress else { return true }
        if easy.long(CURLINFO_NUM_CONNECTS) > 0 {
            // A new connection: its socket is among those not keyed yet.
            connections.keyNewSockets()
            return true
        }
        let key = ConnectionRegistry.key(remoteAddress: remoteAddress, remotePort: remotePort, localPort: localPort)
        guard let connection = connections.connection(forKey: key),
            ConnectionRegistry.mustCheck(connection, transferMayMultiplex: transfer.mayMultiplex),
            ConnectionRegistry.hasPendingInput(connection.socket)
        else { return true }
        transfer.restartOnNewConnection = true
        return false
    }

    private func run(_ operation: CookieOperation) {
        if cookieHandle == nil, let cookieShare, let easy = EasyHandle() {
            easy.set(CURLOPT_SHARE, pointer: cookieShare)
            easy.set(CURLOPT_COOKIEFILE, "")
            cookieHandle = easy
        }
        switch operation {
        case .list(let answer):
            var lines: [String] = []
            var pointer: UnsafeMutableRawPointer?
            if let easy = cookieHandle, ccurl_easy_getinfo_ptr(easy.raw, CURLINFO_COOKIELIST, &pointer) == CURLE_OK {
                let list = pointer?.assumingMemoryBound(to: curl_slist.self)
                var node = list
                while let current = node {
                    if let data = current.pointee.data { lines.append(String(cString: data)) }
                    node = current.pointee.next
                }
                curl_slist_free_all(list)
            }
            answer(lines)
        case .removeAll(let done):
            cookieHandle?.set(CURLOPT_COOKIELIST, "ALL")
            done()
        }
    }

    private func begin(_ transfer: Transfer) {
        let easy: EasyHandle
        if let reused = idleHandles.popLast() {
            easy = reused
        } else if let created = EasyHandle() {
            configureConstants(created)
            easy = created
            easyHandleCount += 1
        } else {
            transfer.state = .done
            transfer.completion(
                .failure(
                    TransportError(
                        .other,
                        message: "cannot create a libcurl easy handle (out of memory, or libcurl older than 7.63)"
                    )
                )
            )
            return
        }
        transfer.easy = easy
        easy.transferCell.pointee = transfer.unmanagedPointer
        transfer.state = .active
        if configuration.redirects.maxRedirects <= 0 { transfer.request.options.followsRedirects = false }
        transfer.activeIndex = active.count
        active.append(transfer)
        publishStatistics()
        if let error = configure(easy, for: transfer) {
            finish(transfer, .failure(error))
            return
        }
        curl_multi_add_handle(multi, easy.raw)
    }

    /// Delivers finished transfers; returns whether any completion ran (with no follow-up in
    /// `local`, its code probably handed the outcome to another thread).
    private func readCompletions() -> Bool {
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

    /// Fails the transfers that moved no byte for ``idleNanoseconds`` once their request was on its
    /// way (time spent waiting for a connection or connecting does not count: the connect timeout
    /// covers it). Checks every ``idleCheckNanoseconds``; returns whether it failed any.
    ///
    /// libcurl's own low-speed check (`CURLOPT_LOW_SPEED_*`) would do this too, but it rearms a
    /// timer on every transfer, which costs about 500 instructions per request; this costs a clock
    /// read per loop round and a look at each active transfer a few times per timeout.
    private func failIdleTransfers() -> Bool {
        let now = Self.monotonicNanoseconds()
        guard now >= nextIdleCheck else { return false }
        nextIdleCheck = now &+ idleCheckNanoseconds
        var failed = false
        // Backwards: `finish` moves the last transfer into the finished one's place.
        var index = active.count
        while index > 0 {
            index -= 1
            let transfer = active[index]
            guard let easy = transfer.easy else { continue }
            // A stream that paused its body is not idle: its consumer is behind.
            if transfer.activity != transfer.activitySeen || transfer.quietSince == 0 || transfer.streamPaused
                || easy.offset(CURLINFO_PRETRANSFER_TIME_T) == 0
            {
                transfer.activitySeen = transfer.activity
                transfer.quietSince = now
                continue
            }
            guard now &- transfer.quietSince >= idleNanoseconds else { continue }
            let seconds = Double(idleNanoseconds) / 1e9
            let error = TransportError(
                .timedOut,
                message: "no data moved for \(seconds) s: no request bytes sent, no complete response header line or body bytes received (idle timeout)",
                requestBytesSent: easy.sentRequestBytes
            )
            finish(transfer, .failure(error))
            failed = true
        }
        return failed
    }

    /// With nothing in flight after handing completions off, waits up to ``spinNanoseconds`` for
    /// another thread to submit the follow-up request, so that it needs no `curl_multi_wakeup`.
    /// Returns whether a submission arrived.
    private func awaitFollowUp() -> Bool {
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

    private static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }

    private func completed(_ transfer: Transfer, code: CURLcode) {
        guard let easy = transfer.easy else { return }
        if code == CURLE_ABORTED_BY_CALLBACK && transfer.restartOnNewConnection {
            // Nothing was sent on the refused connection (libcurl closes it): the same request
            // goes out again on a new one.
            curl_multi_remove_handle(multi, easy.raw)
            transfer.requiresNewConnection = true
            if let error = configure(easy, for: transfer) {
                finish(transfer, .failure(error))
                return
            }
            curl_multi_add_handle(multi, easy.raw)
            return
        }
        if code == CURLE_OK && transfer.headerState != .complete {
            // libcurl 7.88 takes a header block cut off by the peer for a complete response.
            finish(
                transfer,
                .failure(
                    TransportError(
                        .connectionReset,
                        message: "the connection closed before the response header was complete",
                        curlCode: Int(CURLE_PARTIAL_FILE.rawValue),
                        requestBytesSent: true
                    )
                )
            )
            return
        }
        if code != CURLE_OK {
            finish(transfer, .failure(CurlErrorMapping.error(code: code, easy: easy, transfer: transfer)))
            return
        }
        let status = easy.long(CURLINFO_RESPONSE_CODE)
        if transfer.request.options.followsRedirects, Transfer.isRedirect(status),
            let location = easy.string(CURLINFO_REDIRECT_URL)
        {
            switch redirect(transfer, status: status, to: location) {
            case .followed: return
            case .failed(let error):
                finish(transfer, .failure(error))
                return
            case .deliver: break
            }
        }
        if transfer.fileDescriptor >= 0 && fsync(transfer.fileDescriptor) != 0 && errno != EINVAL {
            finish(
                transfer,
                .failure(
                    TransportError(
                        .fileIO,
                        message: "cannot flush the response body file: \(String(cString: strerror(errno)))",
                        osErrno: errno,
                        requestBytesSent: true
                    )
                )
            )
            return
        }
        if let partial = transfer.partialFile, case .file(let path) = transfer.request.options.destination {
            // A continued download whose final response had no body did not continue it.
            if transfer.resumeOffset > 0 && !transfer.sawBody { _ = ftruncate(transfer.fileDescriptor, 0) }
            // The whole body is on disk: it takes the destination's place in one step.
            if rename(partial, path) != 0 {
                finish(
                    transfer,
                    .failure(
                        TransportError(
                            .fileIO,
                            message: "cannot move the response body to \(path): \(String(cString: strerror(errno)))",
                            osErrno: errno,
                            requestBytesSent: true
                        )
                    )
                )
                return
            }
            transfer.partialFile = nil
        }
        // Learned from the transfer that opened the connection (on HTTP/1.1 it is the first to
        // complete on it); later ones skip the lookups.
        if transfer.mayMultiplex && checksReusedConnections && easy.long(CURLINFO_NUM_CONNECTS) > 0 {
            noteProtocol(of: easy)
        }
        let response = TransportResponse(
            status: HTTPResponse.Status(code: min(max(status, 0), 999)),
            rawHeaders: easy.headerBlock.bytes,
            body: transfer.fileDescriptor >= 0 || transfer.stream != nil ? nil : transfer.body.takeData(),
            bodyFile: transfer.fileDescriptor >= 0 ? destinationPath(transfer) : nil,
            metrics: metrics(easy, transfer),
            url: transfer.url
        )
        finish(transfer, .success(response))
    }

    /// Records whether the connection a response came on multiplexes (HTTP/2), so that reusing
    /// an HTTP/1.1 one over TLS is checked before sending and an HTTP/2 one is not.
    private func noteProtocol(of easy: EasyHandle) {
        var address: UnsafeMutablePointer<CChar>? = nil
        guard ccurl_easy_getinfo_string(easy.raw, CURLINFO_PRIMARY_IP, &address) == CURLE_OK, let address else { return }
        let key = ConnectionRegistry.key(
            remoteAddress: address,
            remotePort: easy.long(CURLINFO_PRIMARY_PORT),
            localPort: easy.long(CURLINFO_LOCAL_PORT)
        )
        connections.setMultiplexed(easy.long(CURLINFO_HTTP_VERSION) >= 3, forKey: key)
    }

    private func destinationPath(_ transfer: Transfer) -> String? {
        if case .file(let path) = transfer.request.options.destination { return path }
        return nil
    }

    /// Detaches the handle, returns it to the pool and delivers the outcome (outside any lock).
    private func finish(_ transfer: Transfer, _ result: Result<TransportResponse, TransportError>) {
        guard transfer.state == .active, let easy = transfer.easy else { return }
        curl_multi_remove_handle(multi, easy.raw)
        easy.transferCell.pointee = nil
        transfer.easy = nil
        transfer.state = .done
        transfer.closeFiles()
        let index = transfer.activeIndex
        let last = active.removeLast()
        if last !== transfer {
            active[index] = last
            last.activeIndex = index
        }
        transfer.activeIndex = -1
        // Every handle is kept while transfers are in flight or queued (the next ones reuse them:
        // creating a handle and setting its constant options costs about as much as a transfer);
        // beyond `maxIdleHandles` they are freed as soon as the driver has nothing left to do.
        idleHandles.append(easy)
        if active.isEmpty && local.isEmpty && deferred.isEmpty { trimIdleHandles() }
        publishStatistics()
        // A failed transfer leaves the destination as it was, and no partial body behind unless
        // it was asked to keep one that can be continued.
        var result = result
        if case .failure(var error) = result, let kept = transfer.keepPartialFile(after: error) {
            error.partialDownload = kept
            result = .failure(error)
        }
        transfer.removePartialFile()
        transfer.completion(result)
    }

    private func trimIdleHandles() {
        while idleHandles.count > configuration.maxIdleHandles {
            idleHandles.removeLast()
            easyHandleCount -= 1
        }
    }

    private func publishStatistics() {
        statistics.activeTransfers.store(active.count, ordering: .relaxed)
        statistics.easyHandles.store(easyHandleCount, ordering: .relaxed)
    }

    private func tearDown() {
        for command in inbox.withLock({ inbox -> [Command] in
            inbox.stopped = true
            defer { inbox.commands.removeAll() }
            return inbox.commands
        }) + local {
            switch command {
            case .start(let transfer) where transfer.state == .pending:
                transfer.state = .done
                transfer.completion(.failure(TransportError(.shutdown, message: "the transport was shut down")))
            case .job(let job):
                Self.runElsewhere(job)
            case .safePoint(let work):
                deferred.append(work)
            case .cookies(.list(let answer)):
                answer([])
            case .cookies(.removeAll(let done)):
                done()
            default:
                break
            }
        }
        local.removeAll()
        while let transfer = active.last {
            finish(transfer, .failure(TransportError(.shutdown, message: "the transport was shut down")))
        }
        idleHandles.removeAll()
        easyHandleCount = 0
        publishStatistics()
        curl_multi_cleanup(multi)
        // The share goes last: no handle may still use it.
        cookieHandle = nil
        if let cookieShare { curl_share_cleanup(cookieShare) }
        constantStrings.free()
        // Work scheduled by the completions above (handler drains) still runs, here; jobs move to
        // the global executor. Anything scheduled from now on takes the callers' fallbacks.
        leaderThread.store(0, ordering: .relaxed)
        executor = nil
        standby?.stop()
        for work in deferred { Self.run(work, on: nil) }
        deferred.removeAll()
    }

    // MARK: - Per-transfer configuration

    /// Options that are the same for every transfer of this transport: set once, when a handle is
    /// created. Handles are not `curl_easy_reset` between transfers; instead ``configure(_:for:)``
    /// gives *every* per-transfer option a value on every transfer (its default when unused; the
    /// handle skips the call when it already holds that value), so nothing of an earlier request
    /// can leak into the next (the CVE-2022-32221 class of bug).
    private func configureConstants(_ easy: EasyHandle) {
        easy.set(CURLOPT_NOSIGNAL, true)
        easy.set(CURLOPT_ERRORBUFFER, pointer: easy.errorBuffer)
        easy.set(CURLOPT_PROTOCOLS_STR, pointer: constantStrings.protocols)
        easy.set(CURLOPT_FOLLOWLOCATION, false)
        if let cookieShare {
            easy.set(CURLOPT_SHARE, pointer: cookieShare)
            easy.set(CURLOPT_COOKIEFILE, "")  // turns the engine on; reads no file
        }
        if let resolveList = constantStrings.resolveList { easy.set(CURLOPT_RESOLVE, pointer: resolveList) }
        if let socket = configuration.unixSocketPath { easy.set(CURLOPT_UNIX_SOCKET_PATH, socket) }
        if let userAgent = constantStrings.userAgent { easy.set(CURLOPT_USERAGENT, pointer: userAgent) }
        easy.set(CURLOPT_HEADERFUNCTION, callback: CurlCallbacks.header)
        easy.set(CURLOPT_WRITEFUNCTION, callback: CurlCallbacks.write)
        easy.set(CURLOPT_READFUNCTION, callback: CurlCallbacks.read)
        let cell = UnsafeRawPointer(easy.transferCell)
        for option in [
            CURLOPT_PRIVATE, CURLOPT_HEADERDATA, CURLOPT_WRITEDATA, CURLOPT_READDATA, CURLOPT_SEEKDATA,
            CURLOPT_XFERINFODATA,
        ] {
            easy.set(option, pointer: cell)
        }
        _ = ccurl_easy_setopt_seek_callback(easy.raw, CurlCallbacks.seek)
        // Sockets are opened and closed through the driver: it knows them (to check a reused
        // connection before a request goes out on it) and can tell why one could not be opened.
        easy.set(CURLOPT_OPENSOCKETDATA, pointer: cell)
        _ = ccurl_easy_setopt_opensocket_callback(easy.raw, CurlCallbacks.openSocket)
        easy.set(CURLOPT_CLOSESOCKETDATA, pointer: UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()))
        _ = ccurl_easy_setopt_closesocket_callback(easy.raw, CurlCallbacks.closeSocket)
        if checksReusedConnections {
            _ = ccurl_easy_setopt_prereq_data(easy.raw, UnsafeMutableRawPointer(mutating: cell))
            _ = ccurl_easy_setopt_prereq_callback(easy.raw, CurlCallbacks.beforeRequest)
        }
        _ = ccurl_easy_setopt_xferinfo_callback(easy.raw, CurlCallbacks.progress)
        easy.set(CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeout.milliseconds())
        if configuration.automaticDecompression {
            easy.set(CURLOPT_ACCEPT_ENCODING, pointer: constantStrings.acceptEncoding)
        }
        // HTTP version and TLS. Verification stays at libcurl's default (on); the minimum is TLS 1.2.
        switch configuration.httpVersion {
        case .http1_1: easy.set(CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1)
        case .http2OverTLS: easy.set(CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS)
        }
        easy.set(CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2)
        let tls = configuration.tls
        if let caFile = tls.caFile { easy.set(CURLOPT_CAINFO, caFile) }
        if let caPath = tls.caPath { easy.set(CURLOPT_CAPATH, caPath) }
        if let client = tls.clientCertificate {
            easy.set(CURLOPT_SSLCERT, client.certificatePath)
            easy.set(CURLOPT_SSLKEY, client.privateKeyPath)
            if let password = client.privateKeyPassword { easy.set(CURLOPT_KEYPASSWD, password) }
        }
        if !tls.pinnedPublicKeys.isEmpty {
            easy.set(CURLOPT_PINNEDPUBLICKEY, tls.pinnedPublicKeys.joined(separator: ";"))
        }
        // Proxy settings are explicit so libcurl does not read the environment per transfer.
        easy.set(CURLOPT_NOPROXY, pointer: constantStrings.noProxy)
    }

    /// Whether a transfer starting now must open a new connection, and the largest age in whole
    /// seconds (`CURLOPT_MAXLIFETIME_CONN`, 0 for none) of a connection it may reuse, so that no
    /// connection opened before the last network change is reused.
    ///
    /// libcurl drops a connection whose age in whole seconds exceeds the limit, so `floor(s) - 1`,
    /// `s` seconds after the change, refuses every older connection (and perhaps a few newer ones,
    /// which is safe). The limit cannot express less than 1 (0 disables it): during the first 2
    /// seconds every transfer opens a new connection instead.
    private func connectionLimitsAfterNetworkChange() -> (fresh: Bool, maxLifetime: Int) {
        guard let changedAt = networkChangedAt else { return (false, 0) }
        let seconds = (Self.monotonicNanoseconds() &- changedAt) / 1_000_000_000
        if seconds < 2 { return (true, 0) }
        if seconds > 120 {
            networkChangedAt = nil
            return (false, 0)
        }
        return (false, Int(seconds) - 1)
    }

    /// Gives the handle every per-transfer option this transfer needs (see
    /// ``EasyHandle/TransferOptions``; the handle sets only those that differ from what it holds).
    private func configure(_ easy: EasyHandle, for transfer: Transfer) -> TransportError? {
        transfer.resetForHop()
        easy.errorBuffer[0] = 0
        let request = transfer.request
        let options = request.options
        transfer.url = request.urlString
        // A stream holds what it decides to (server-sent events bound their lines and events):
        // only a limit the request sets applies to what passes through it.
        if case .stream = options.destination {
            transfer.limit = options.maxResponseSize ?? Int64.max
        } else {
            transfer.limit = options.maxResponseSize ?? configuration.maxResponseSize
        }
        var header: CurlHeaderLines
        let method: EasyHandle.Method
        do {
            header = try CurlHeaderLines(request)
            method = try methodOptions(request, declaredLength: header.declaredLength)
        } catch {
            return error
        }
        // Response destination: a file is opened before the head is set, since continuing a
        // partial one adds `Range` and `If-Range` (on every hop, so a redirect keeps them).
        transfer.stream = nil
        if case .stream(let stream) = options.destination {
            transfer.stream = stream
            if stream.isPaced {
                stream.attach { [weak transfer] in
                    if let transfer { transfer.driver.submit(.resumeDelivery(transfer)) }
                }
            }
        } else if case .file(let path) = options.destination {
            if transfer.fileDescriptor < 0,
                let error = openBodyFile(for: transfer, destination: path, resuming: options.resumingDownload)
            {
                return error
            }
            if transfer.resumeOffset > 0, let validator = transfer.resumeValidator {
                header.lines.append("Range: bytes=\(transfer.resumeOffset)-")
                header.lines.append("If-Range: \(validator)")
            }
        }
        transfer.bodyLength = request.body == nil ? 0 : method.postFieldSize
        let newConnection = transfer.requiresNewConnection
        transfer.requiresNewConnection = false
        let secure = request.isSecure
        transfer.mayMultiplex = secure && configuration.httpVersion == .http2OverTLS
        // After a network change, connections opened before it may be dead (libcurl would find out
        // only by failing a request on one): see `CurlTransport.networkDidChange()`.
        let (freshAfterChange, maxLifetime) = connectionLimitsAfterNetworkChange()
        let settings = EasyHandle.TransferOptions(
            url: transfer.url,
            timeoutMilliseconds: (options.timeout ?? configuration.requestTimeout).map {
                max(1, $0.milliseconds())
            } ?? 0,
            maxFileSize: transfer.limit,
            // Over TLS, wait for a connection that may turn out to multiplex rather than open more.
            // Never for plain http: HTTP/1.1 cannot multiplex, and waiting would serialise requests.
            pipeWait: secure && configuration.httpVersion == .http2OverTLS,
            proxy: secure ? constantStrings.httpsProxy : constantStrings.httpProxy,
            // A request that is not safe to repeat never rides a reused connection: libcurl would
            // silently re-send it if that connection turned out to be closed.
            freshConnect: !request.isIdempotent || options.requiresFreshConnection || freshAfterChange
                || newConnection,
            maxConnectionAge: maxLifetime,
            noProgress: options.progress == nil,
            method: method,
            headerLines: header.lines
        )
        if let refusal = easy.apply(settings) { return refusal }
        return nil
    }

    /// Opens the file a `.file` destination's body is written to until it is complete, once per
    /// transfer (redirects keep it): the partial download to continue when it is intact,
    /// otherwise a new file next to the destination under a name of its own (moved onto it only
    /// when complete: readers never see a partial body, and a failure leaves the destination
    /// untouched).
    private func openBodyFile(
        for transfer: Transfer,
        destination path: String,
        resuming: PartialDownload?
    ) -> TransportError? {
        if let resuming {
            var info = stat()
            let intact =
                resuming.length > 0 && stat(resuming.path, &info) == 0 && Int64(info.st_size) == resuming.length
                && !resuming.validator.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 }
            let descriptor = intact ? open(resuming.path, O_WRONLY | O_APPEND | O_CLOEXEC) : -1
            if descriptor >= 0 {
                transfer.fileDescriptor = descriptor
                transfer.partialFile = resuming.path
                transfer.resumeOffset = resuming.length
                transfer.resumeValidator = resuming.validator
                return nil
            }
            resuming.discard()
        }
        let partial = path + ".brickpart-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        if descriptor < 0 {
            return TransportError(
                .fileIO,
                message: "cannot create the response body file \(partial): \(String(cString: strerror(errno)))",
                osErrno: errno
            )
        }
        transfer.fileDescriptor = descriptor
        transfer.partialFile = partial
        return nil
    }

    /// How `request`'s method and body are expressed to libcurl (for a body, its length is the
    /// `postFieldSize`).
    private func methodOptions(
        _ request: TransportRequest,
        declaredLength: Int64?
    ) throws(TransportError) -> EasyHandle.Method {
        let method = request.method
        guard let body = request.body else {
            switch method {
            case .get: return EasyHandle.Method(post: false, postFieldSize: -1, noBody: false)
            case .head: return EasyHandle.Method(post: false, postFieldSize: -1, noBody: true)
            case .post: return EasyHandle.Method(post: true, postFieldSize: 0, noBody: false)
            default:
                return EasyHandle.Method(post: false, postFieldSize: -1, noBody: false, customRequest: method.rawValue)
            }
        }
        let length = try body.contentLength()
        if let declaredLength, declaredLength != length {
            throw TransportError(
                .invalidRequest,
                message: "Content-Length \(declaredLength) does not match the body's \(length) bytes"
            )
        }
        let custom = method == .post ? nil : method.rawValue
        return EasyHandle.Method(post: true, postFieldSize: length, noBody: false, customRequest: custom)
    }

    // MARK: - Redirects

    private enum RedirectOutcome {
        case followed
        case failed(TransportError)
        case deliver
    }

    /// Follows a redirect as ``RedirectDecision`` says: parses the location, asks, and applies the
    /// answer to the transfer (new head, body kept or dropped, credentials kept or dropped).
    private func redirect(_ transfer: Transfer, status: Int, to location: String) -> RedirectOutcome {
        let old = transfer.request
        let parts: URLValidator.Parts
        do {
            parts = try URLValidator.parse(location)
        } catch {
            return .failed(
                TransportError(
                    .redirectRefused,
                    message: "redirect to an unusable location: \(error.message)",
                    requestBytesSent: true
                )
            )
        }
        var head = old.head
        let decision = RedirectDecision.decide(
            status: status,
            method: head.method,
            from: RedirectDecision.Origin(scheme: head.scheme ?? "http", authority: head.authority ?? ""),
            to: RedirectDecision.Origin(scheme: parts.scheme, authority: parts.authority(in: location)),
            hopsSoFar: transfer.redirectCount,
            policy: configuration.redirects,
            credentialsStripped: transfer.strippedCredentials
        )
        let method: HTTPRequest.Method
        let dropsBody: Bool
        let stripsCredentials: Bool
        switch decision {
        case .refuse(let kind, let message):
            return .failed(TransportError(kind, message: message, requestBytesSent: true))
        case .follow(let next, let drops, let strips):
            (method, dropsBody, stripsCredentials) = (next, drops, strips)
        }
        head.scheme = parts.scheme
        head.authority = parts.authority(in: location)
        head.path = parts.pathAndQuery(in: location)
        head.method = method
        var body = old.body
        if dropsBody {
            body = nil
            head.headerFields[.contentType] = nil
            head.headerFields[.contentLength] = nil
            head.headerFields[.contentEncoding] = nil
        }
        if stripsCredentials {
            transfer.strippedCredentials = true
            head.headerFields[.authorization] = nil
            head.headerFields[.cookie] = nil
            head.headerFields[.proxyAuthorization] = nil
        }
        transfer.request.head = head
        transfer.request.body = body
        transfer.redirectCount += 1
        guard let easy = transfer.easy else { return .deliver }
        curl_multi_remove_handle(multi, easy.raw)
        // A `.file` destination keeps its partial file: a followed redirect's body is never
        // written, so the next hop finds it as this one did.
        if let error = configure(easy, for: transfer) {
            // The first hop was sent: the server may have acted on it.
            return .failed(
                TransportError(
                    error.kind == .invalidRequest ? .redirectRefused : error.kind,
                    message: error.kind == .invalidRequest
                        ? "redirect to an unusable location: \(error.message)" : error.message,
                    curlCode: error.curlCode,
                    osErrno: error.osErrno,
                    requestBytesSent: true
                )
            )
        }
        curl_multi_add_handle(multi, easy.raw)
        return .followed
    }

    // MARK: - Metrics

    private func metrics(_ easy: EasyHandle, _ transfer: Transfer) -> TransportMetrics {
        var metrics = TransportMetrics()
        metrics.nameLookup = .microseconds(easy.offset(CURLINFO_NAMELOOKUP_TIME_T))
        metrics.connect = .microseconds(easy.offset(CURLINFO_CONNECT_TIME_T))
        metrics.tlsHandshake = .microseconds(easy.offset(CURLINFO_APPCONNECT_TIME_T))
        metrics.firstByte = .microseconds(easy.offset(CURLINFO_STARTTRANSFER_TIME_T))
        metrics.total = .microseconds(easy.offset(CURLINFO_TOTAL_TIME_T))
        switch easy.long(CURLINFO_HTTP_VERSION) {
        case 1: metrics.httpVersion = .http1_0  // CURL_HTTP_VERSION_1_0
        case 2: metrics.httpVersion = .http1_1
        case 3: metrics.httpVersion = .http2
        case 30: metrics.httpVersion = .http3
        default: metrics.httpVersion = .unknown
        }
        metrics.connectionReused = easy.long(CURLINFO_NUM_CONNECTS) == 0
        metrics.requestHeaderBytes = Int64(easy.long(CURLINFO_REQUEST_SIZE))
        metrics.bytesSent = transfer.bodyBytesSent
        metrics.bytesReceived = transfer.received
        metrics.redirectCount = transfer.redirectCount
        return metrics
    }
}

/// C copies of the strings every transfer sets; freed when the driver stops.
struct ConstantStrings {
    let userAgent: UnsafeMutablePointer<CChar>?
    let protocols: UnsafeMutablePointer<CChar>
    let acceptEncoding: UnsafeMutablePointer<CChar>
    let httpProxy: UnsafeMutablePointer<CChar>
    let httpsProxy: UnsafeMutablePointer<CChar>
    let noProxy: UnsafeMutablePointer<CChar>
    /// ``CurlTransport/Configuration/hostOverrides`` as `CURLOPT_RESOLVE` entries, or `nil`.
    let resolveList: UnsafeMutablePointer<curl_slist>?

    init(proxy: ResolvedProxy, userAgent: String?, hostOverrides: [CurlTransport.HostOverride]) {
        self.userAgent = userAgent.map { strdup($0) }
        protocols = strdup("http,https")
        // An explicit list: "" would make libcurl rebuild the list of its decoders on every transfer.
        acceptEncoding = strdup(CurlGlobal.supportedEncodings)
        httpProxy = strdup(proxy.http)
        httpsProxy = strdup(proxy.https)
        noProxy = strdup(proxy.noProxy)
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for override in hostOverrides {
            list = curl_slist_append(list, override.resolveEntry)
        }
        resolveList = list
    }

    func free() {
        for pointer in [userAgent, protocols, acceptEncoding, httpProxy, httpsProxy, noProxy] {
            Glibc.free(pointer)
        }
        if let resolveList { curl_slist_free_all(resolveList) }
    }
}


/// A `TaskExecutor` whose jobs run on a ``CurlDriver``'s thread, between rounds of
/// `curl_multi_perform`: a task that prefers it resumes after each response with no thread hop.
final class CurlTaskExecutor: TaskExecutor {
    /// Strong: jobs enqueued after the driver's loop ended still reach it (and are sent to the
    /// global executor from there).
    private let driver: CurlDriver

    init(driver: CurlDriver) { self.driver = driver }

    func enqueue(_ job: consuming ExecutorJob) {
        driver.submit(.job(UnownedJob(job)))
    }
}

/// The standby side of a ``CurlDriver``'s lease: the watch on safe-point work, and the one thread
/// that waits to take the I/O over when a piece of work runs too long.
///
/// The standby sleeps one tick at a time while work is being run (and parks, at no cost, after
/// about 20 ms in which no work started); seeing the same piece of work at two consecutive ticks, it takes the
/// lease with one compare-and-exchange on ``watched``.
final class Standby: Sendable {
    private static let takenOver: UInt64 = 1 << 63
    /// While the leader runs a piece of safe-point work: its sequence number (never 0), with
    /// ``takenOver`` or-ed in once a standby took the lease. 0 otherwise.
    private let watched = Atomic<UInt64>(0)
    /// The sequence number of the last piece of work started, kept after it ends: how the standby
    /// tells a quiet tick from a busy one whose work happened between two looks.
    private let lastStarted = Atomic<UInt64>(0)
    /// Whether a standby thread exists (waiting, or started and about to).
    private let available = Atomic<Bool>(false)
    private let parked = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private let wake = DispatchSemaphore(value: 0)
    private let tick: timespec
    private let ticksBeforeParking: Int

    init(tickNanoseconds: UInt64) {
        tick = timespec(tv_sec: Int(tickNanoseconds / 1_000_000_000), tv_nsec: Int(tickNanoseconds % 1_000_000_000))
        ticksBeforeParking = max(2, Int(20_000_000 / tickNanoseconds))
    }

    /// The sequence number of the next piece of work: never 0, never with the taken-over bit.
    static func next(after sequence: UInt64) -> UInt64 {
        let next = (sequence &+ 1) & ~takenOver
        return next == 0 ? 1 : next
    }

    // MARK: Leader side

    /// Before running safe-point work: makes sure a standby thread exists.
    func ensureAvailable(start: () -> Bool) {
        if available.load(ordering: .relaxed) || stopped.load(ordering: .relaxed) { return }
        if available.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged, !start() {
            available.store(false, ordering: .relaxed)
        }
    }

    /// The leader starts a piece of work. Sequentially consistent, paired with ``park()``.
    func watch(_ sequence: UInt64) {
        lastStarted.store(sequence, ordering: .relaxed)
        watched.store(sequence, ordering: .sequentiallyConsistent)
        if parked.load(ordering: .sequentiallyConsistent),
            parked.exchange(false, ordering: .sequentiallyConsistent)
        {
            wake.signal()
        }
    }

    /// The leader finished the piece of work; returns whether it still holds the lease.
    func unwatch(_ sequence: UInt64) -> Bool {
        watched.compareExchange(expected: sequence, desired: 0, ordering: .acquiringAndReleasing).exchanged
    }

    /// The loop ended: the standby thread exits, and so does every leader demoted later.
    func stop() {
        stopped.store(true, ordering: .sequentiallyConsistent)
        if parked.exchange(false, ordering: .sequentiallyConsistent) { wake.signal() }
    }

    // MARK: Standby side

    /// A leader that lost the lease and finished its work offers to be the standby; `false` when
    /// there already is one (or the loop ended): the thread then exits.
    func enlist() -> Bool {
        !stopped.load(ordering: .relaxed)
            && available.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
    }

    /// Waits until a piece of work has run for a whole tick, then takes the lease: returns `true`
    /// when this thread is now the leader, `false` when the loop ended.
    func awaitTakeover() -> Bool {
        var lastSeen: UInt64 = 0
        var lastStartedSeen: UInt64 = 0
        var quietTicks = 0
        while !stopped.load(ordering: .relaxed) {
            if quietTicks >= ticksBeforeParking {
                park()
                quietTicks = 0
                lastSeen = 0
                continue
            }
            var request = tick
            var remaining = timespec()
            while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
            let seen = watched.load(ordering: .relaxed)
            if seen == 0 || seen & Self.takenOver != 0 {
                let started = lastStarted.load(ordering: .relaxed)
                quietTicks = started == lastStartedSeen ? quietTicks + 1 : 0
                lastStartedSeen = started
                lastSeen = 0
                continue
            }
            quietTicks = 0
            if seen != lastSeen {
                lastSeen = seen
                continue
            }
            // Acquire: the driver state the old leader wrote before this work is visible here.
            if watched.compareExchange(expected: seen, desired: seen | Self.takenOver, ordering: .acquiring).exchanged {
                // The old leader's `unwatch` now fails; clearing the mark readies the watch for
                // this thread's own work.
                watched.store(0, ordering: .relaxed)
                available.store(false, ordering: .relaxed)
                return true
            }
        }
        return false
    }

    /// Sleeps until the leader runs safe-point work again (or the loop ends).
    private func park() {
        parked.store(true, ordering: .sequentiallyConsistent)
        if watched.load(ordering: .sequentiallyConsistent) != 0 || stopped.load(ordering: .sequentiallyConsistent) {
            // Work started meanwhile: unless the leader already claimed the flag (and signals),
            // keep ticking.
            if parked.exchange(false, ordering: .sequentiallyConsistent) { return }
        }
        wake.wait()
    }
}
