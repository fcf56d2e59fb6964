// Over 450 lines: the one lock around every host's state, each wait it hands out (admission, slots, sweeps), and the quiet host's way around the lock, beside it.
import FoundationEssentials
import Synchronization

/// The I/O shell of traffic control: one ``HostTraffic`` per host under one lock, the waits it
/// asks for (on the session's clock, cancellable), the line for concurrency slots, and the events.
///
/// Every attempt a session sends passes ``admit(_:lifecycle:)`` (or its synchronous first step,
/// ``advance(_:)``) and ends with ``finished(_:_:)``; the retry loop asks
/// ``allowsRetry(_:)`` before each retry. Hosts whose policy is ``HostPolicy/unlimited`` cost a
/// dictionary lookup of the policy and nothing more.
///
/// The session's first host takes no lock while it is quiet (``QuietHost``): with nothing that
/// could hold an attempt back (no rate, pause or cap; the breaker closed), its first attempts
/// are admitted and their successes counted in two atomic words, which every locked step hands
/// to the host's state before it reads or changes any (so budgets, breakers and snapshots see
/// every attempt). Anything else — another host, a retry, a failure, a `429` — takes the lock.
///
/// Memory is bounded: a host unused for ``idleTime`` with nothing learned is forgotten (swept at
/// most every ``sweepInterval``, so admission costs the same however many hosts there are; a
/// learned rate has recovered by then), and past ``maximumHosts`` the least recently used hosts
/// nobody is using are forgotten down to three quarters of the bound. Before that, only hosts with something to
/// remember are kept.
package final class TrafficControl: Sendable {
    /// How long an unused host with nothing learned is kept.
    package static let idleTime: Duration = .seconds(300)
    /// How often idle hosts are swept.
    package static let sweepInterval: Duration = .seconds(10)
    /// The longest pause a host's `Retry-After` imposes on every caller: 10 minutes.
    package static let longestLearnedPause: Duration = .seconds(600)
    /// The hosts kept before idle ones are forgotten at once.
    package static let maximumHosts = 4096

    /// An attempt on its way through admission: the host and what it passed.
    package struct Ticket: Sendable {
        /// The request (its authority finds the host); `nil` for an untracked one.
        let request: TransportRequest?
        let kind: HostTraffic.AttemptKind
        var progress = HostTraffic.Progress()
        /// The latest the attempt may wait until (`nil`: fail rather than wait); set at the first step.
        var deadline: Duration??
        let timeout: Duration?
        let waitsOutPauses: Bool
        /// The attempt's number, should it wait in line.
        var waiter: UInt64 = 0
        /// The host's state, found at the first step: later steps and the outcome need no lookup.
        var slot: HostSlot?

        /// When the attempt was last admitted (or refused), on the session clock.
        var admittedAt = Duration(attoseconds: 0)  // inlined; `.zero` is a call

        /// Whether the request is tracked at all.
        var isTracked: Bool { request != nil }
        /// The host's key, `host[:port]` lowercased, once the first step found its slot.
        var key: String { slot?.key ?? request?.trafficKey ?? "" }

        /// A ticket for a request traffic control does not track (refused, or unlimited).
        static let untracked = Ticket(request: nil, kind: .first, deadline: .some(nil), timeout: nil, waitsOutPauses: true)
    }

    /// One host's traffic in a box, so that a ticket reaches it again without hashing its key.
    package final class HostSlot: @unchecked Sendable {  // `traffic` is read and written only under TrafficControl's lock
        /// The host's key, `host[:port]` lowercased.
        let key: String
        /// Out of line, so that using it costs no exclusivity check (the lock already excludes).
        private let storage: UnsafeMutablePointer<HostTraffic>

        /// The host's traffic state.
        var traffic: HostTraffic {
            unsafeAddress { UnsafePointer(storage) }
            unsafeMutableAddress { storage }
        }

        init(key: String, _ traffic: HostTraffic) {
            self.key = key
            storage = .allocate(capacity: 1)
            storage.initialize(to: traffic)
        }

        deinit {
            storage.deinitialize(count: 1)
            storage.deallocate()
        }
    }

    private struct State {
        var hosts: [String: HostSlot] = [:]
        /// The host of the last new attempt, by its authority as that request's URL spelled it:
        /// most sessions talk to one host, and comparing a few bytes costs less than making and
        /// hashing its key.
        var recentSlot: HostSlot?
        /// The authority and scheme ``recentSlot`` was found for (kept apart: a tuple of the three
        /// was copied, with a reference count on each, every time it was tested).
        var recentAuthority: [UInt8] = []
        var recentIsHTTPS: Bool?
        /// Waiters for a slot that suspended, by number.
        var line: [UInt64: UnsafeContinuation<Bool, Never>] = [:]
        /// Waiters handed a slot before they suspended.
        var handedOver: Set<UInt64> = []
        var nextWaiter: UInt64 = 1
        var lastSweep: Duration = .zero
        var sweeps = 0
    }

    /// The policies.
    package let policies: HostPolicies
    private let clock: SessionClock
    private let report: @Sendable (TrafficEvent) -> Void
    private let state = Lock(State())
    /// The first host sent to, found and counted without the lock while it is quiet. Set once,
    /// under the lock, holding a reference released in `deinit` (an `AtomicLazyReference`'s load
    /// is an unspecialized generic call costing more than the lock it spares).
    private let quietHostReference = Atomic<Unmanaged<QuietHost>?>(nil)
    /// Whether every host is unlimited: then nothing is tracked.
    private let isOff: Bool
    /// Whether some host has a policy of its own (otherwise no lookup by name is needed).
    private let hasHostPolicies: Bool

    deinit {
        quietHostReference.load(ordering: .acquiring)?.release()
    }

    /// The quiet host, once there is one.
    private var quietHost: QuietHost? {
        quietHostReference.load(ordering: .acquiring)?.takeUnretainedValue()
    }

    /// Traffic control for a session.
    ///
    /// - Parameters:
    ///   - policies: The host policies.
    ///   - clock: The session's clock.
    ///   - report: Receives every change (the session logs it and tells its monitors).
    package init(policies: HostPolicies, clock: SessionClock, report: @escaping @Sendable (TrafficEvent) -> Void) {
        self.policies = policies
        self.clock = clock
        self.report = report
        isOff = policies.default.isUnlimited && policies.byHost.values.allSatisfy(\.isUnlimited)
        hasHostPolicies = !policies.byHost.isEmpty
    }

    // MARK: - Admission

    /// A ticket for an attempt of `request`.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - kind: Which attempt of it this is.
    ///   - waitsOutPauses: Whether a pause the server asked for is waited out (within the
    ///     deadline) or refused at once (an offline queue reschedules instead of waiting).
    /// - Returns: The ticket.
    package func ticket(for request: TransportRequest, kind: HostTraffic.AttemptKind, waitsOutPauses: Bool = true) -> Ticket {
        guard !isOff else { return .untracked }
        // With no policy by host, the key is not needed yet: the first step may find the host
        // without it (``State/recentSlot``).
        if hasHostPolicies ? policy(forKey: request.trafficKey).isUnlimited : policies.default.isUnlimited {
            return .untracked
        }
        return Ticket(request: request, kind: kind, timeout: request.options.timeout, waitsOutPauses: waitsOutPauses)
    }

    /// The longest a call to `request`'s host waits in memory for a `Retry-After`: its policy's
    /// ``HostPolicy/WhenLimited/wait(atMost:)`` (30 s by default), zero with
    /// ``HostPolicy/WhenLimited/fail``.
    package func longestRetryAfter(for request: TransportRequest) -> Duration {
        let policy = hasHostPolicies ? policy(forKey: request.trafficKey) : policies.default
        switch policy.whenLimited {
        case .wait(let atMost): return atMost
        case .fail: return .zero
        }
    }

    /// What ``advance(_:)`` decided; the ticket stays with its caller.
    package enum Verdict: Sendable {
        /// Send now.
        case proceed
        /// Must wait: continue with ``admit(continuing:from:lifecycle:)``.
        case wait(HostTraffic.Admission)
        /// Do not send.
        case refuse(TransportError)
    }

    /// One step of admission, under the lock: the verdict for an attempt that has not waited, or
    /// has just waited. The ticket stays with its caller (the first attempt of a callback request
    /// then moves it into its exchange): moved in and out of an enum, each move of its 96 bytes
    /// was an outlined copy.
    ///
    /// - Parameter ticket: The attempt; updated with what the step found and passed.
    /// - Returns: Send, wait, or refuse.
    package func advance(_ ticket: inout Ticket) -> Verdict {
        guard let request = ticket.request else { return .proceed }
        let now = clock.elapsed()
        // The first step of a first attempt to the quiet first host: counted, no lock.
        // (The quiet host is used unretained: it lives as long as traffic control.)
        if ticket.kind == .first, ticket.slot == nil, ticket.waiter == 0,
            let quiet = quietHostReference.load(ordering: .acquiring),
            quiet._withUnsafeGuaranteedRef({ $0.admitsQuietly(request, at: now) })
        {
            ticket.admittedAt = now
            ticket.progress.passedBreaker = true
            ticket.progress.counted = true
            ticket.progress.admittedQuietly = true
            return .proceed
        }
        var changes: [HostTraffic.Change] = []
        let admission = state.withLock { state -> HostTraffic.Admission in
            absorbQuietCounts(&state, at: now)
            sweepIfDue(&state, at: now)
            let slot = ticket.slot ?? slot(for: request, in: &state, at: now)
            defer { refreshQuiet(slot, at: now) }
            ticket.slot = slot
            ticket.admittedAt = now
            if ticket.deadline == nil {
                switch slot.traffic.policy.whenLimited {
                case .fail:
                    ticket.deadline = .some(nil)
                case .wait(let atMost):
                    ticket.deadline = now + min(atMost, ticket.timeout ?? atMost)
                }
            }
            if ticket.waiter == 0 {
                ticket.waiter = state.nextWaiter
                state.nextWaiter &+= 1
            }
            return slot.traffic.admit(
                ticket.kind,
                progress: &ticket.progress,
                at: now,
                deadline: ticket.deadline ?? nil,
                waitsOutPauses: ticket.waitsOutPauses,
                waiter: ticket.waiter,
                changes: &changes
            )
        }
        if !changes.isEmpty { publish(changes, key: ticket.key) }
        switch admission {
        case .proceed:
            return .proceed
        case .wait, .queued:
            return .wait(admission)
        case .refuse(let refusal):
            return .refuse(error(for: refusal, key: ticket.key))
        }
    }

    /// Admits an attempt, waiting where its host's policy says (on the session's clock; `cancel()`
    /// on the lifecycle ends the wait). An attempt that need not wait (most) suspends nowhere.
    ///
    /// - Parameters:
    ///   - ticket: The attempt (``ticket(for:kind:waitsOutPauses:)``); once admitted, the ticket to
    ///     hand to ``finished(_:_:)``.
    ///   - lifecycle: The request's lifecycle, for cancellation; `nil` to rely on task cancellation.
    /// - Returns: `nil` when admitted, or why the attempt may not be sent.
    package func admit(_ ticket: inout Ticket, lifecycle: RequestLifecycle?) async -> TransportError? {
        switch advance(&ticket) {
        case .proceed:
            return nil
        case .refuse(let error):
            return error
        case .wait(let admission):
            switch await admit(continuing: ticket, from: admission, lifecycle: lifecycle) {
            case .success(let admitted):
                ticket = admitted
                return nil
            case .failure(let error):
                return error
            }
        }
    }

    /// Continues an admission that must wait, in a task of its own (so that the lifecycle can
    /// cancel the wait as it cancels a transfer).
    ///
    /// - Parameters:
    ///   - ticket: The attempt.
    ///   - admission: The wait its last step asked for.
    ///   - lifecycle: The request's lifecycle, or `nil`.
    /// - Returns: The ticket, or why the attempt may not be sent.
    package func admit(
        continuing ticket: Ticket,
        from admission: HostTraffic.Admission,
        lifecycle: RequestLifecycle?
    ) async -> Result<Ticket, TransportError> {
        let waiting = Task { await self.wait(ticket, from: admission) }
        lifecycle?.attach(TransportTask { waiting.cancel() })
        return await withTaskCancellationHandler {
            await waiting.value
        } onCancel: {
            waiting.cancel()
        }
    }

    private func wait(_ ticket: Ticket, from admission: HostTraffic.Admission) async -> Result<Ticket, TransportError> {
        var ticket = ticket
        var admission = admission
        while true {
            switch admission {
            case .wait(let until):
                do {
                    try await clock.sleepUntilElapsed(until)
                } catch {
                    return .failure(abandon(&ticket))
                }
            case .queued:
                guard await waitForSlot(ticket) else {
                    if Task.isCancelled { return .failure(abandon(&ticket)) }
                    let cap = state.withLock { _ in ticket.slot?.traffic.policy.maximumConcurrentRequests } ?? 0
                    _ = abandon(&ticket)
                    return .failure(error(for: .concurrency(cap: cap), key: ticket.key))
                }
                ticket.progress.holdsSlot = true
            case .proceed, .refuse:
                break
            }
            if Task.isCancelled { return .failure(abandon(&ticket)) }
            switch advance(&ticket) {
            case .proceed: return .success(ticket)
            case .refuse(let error): return .failure(error)
            case .wait(let next): admission = next
            }
        }
    }

    /// Waits in line until a slot is handed over (`true`), or the deadline passes or the task is
    /// cancelled (`false`).
    private func waitForSlot(_ ticket: Ticket) async -> Bool {
        let waiter = ticket.waiter
        guard let slot = ticket.slot else { return false }
        let deadline = (ticket.deadline ?? nil) ?? clock.elapsed()
        let clock = self.clock
        let timer = Task { [weak self] in
            try? await clock.sleepUntilElapsed(deadline)
            self?.leaveLine(waiter, slot: slot)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Bool, Never>) in
                // Handed a slot already, out of line already (deadline, cancellation), or in line.
                let settled = state.withLock { state -> Bool? in
                    if state.handedOver.remove(waiter) != nil { return true }
                    if !slot.traffic.waiters.contains(waiter) { return false }
                    state.line[waiter] = continuation
                    return nil
                }
                if let settled { continuation.resume(returning: settled) }
            }
        } onCancel: {
            self.leaveLine(waiter, slot: slot)
        }
    }

    /// A waiter gives up its place (deadline or cancellation); resumed with `false` if it was
    /// still in line.
    private func leaveLine(_ waiter: UInt64, slot: HostSlot) {
        let continuation = state.withLock { state -> UnsafeContinuation<Bool, Never>? in
            guard slot.traffic.leaveLine(waiter) else { return nil }
            return state.line.removeValue(forKey: waiter)
        }
        continuation?.resume(returning: false)
    }

    /// Gives back what a ticket holds and returns the cancellation error.
    private func abandon(_ ticket: inout Ticket) -> TransportError {
        release(&ticket)
        return TransportError(.cancelled, message: "cancelled while waiting for the host's traffic policy")
    }

    /// Gives back what a ticket holds without an outcome (cancelled, or not sent after all).
    ///
    /// - Parameter ticket: The ticket; cleared.
    private func release(_ ticket: inout Ticket) {
        guard ticket.isTracked else { return }
        let now = clock.elapsed()
        var changes: [HostTraffic.Change] = []
        var progress = ticket.progress
        let handedTo = state.withLock { state -> UInt64? in
            absorbQuietCounts(&state, at: now)
            guard let slot = ticket.slot else { return nil }
            defer { refreshQuiet(slot, at: now) }
            return slot.traffic.abandon(&progress, at: now, changes: &changes)
        }
        ticket.progress = progress
        hand(handedTo)
        // The key is made only when there is something to say (most outcomes change nothing).
        if !changes.isEmpty { publish(changes, key: ticket.key) }
    }

    // MARK: - Outcomes

    /// An attempt ended: releases what it held and learns from its outcome.
    ///
    /// - Parameters:
    ///   - ticket: The attempt's ticket.
    ///   - result: The transport's result.
    package func finished(_ ticket: Ticket, _ result: Result<TransportResponse, TransportError>) {
        guard ticket.isTracked else { return }
        let observed: HostTraffic.Observed
        switch result {
        case .success(let response):
            let retryAfter =
                response.status.code == 429 || response.status.code == 503
                ? response.headerFields[.retryAfter].flatMap { RetryAfterParsing.delay($0, now: Date()) }
                    .map { min($0, Self.longestLearnedPause) }
                : nil
            observed = .status(response.status.code, retryAfter: retryAfter)
        case .failure(let error):
            observed = .failure(error.kind)
        }
        // The success of an attempt admitted quietly, its host still quiet: counted, no lock.
        if ticket.progress.admittedQuietly, HostTraffic.verdict(observed) == .success,
            let quiet = quietHostReference.load(ordering: .acquiring),
            quiet._withUnsafeGuaranteedRef({ $0.countsQuietly(successAdmittedAt: ticket.admittedAt) })
        {
            return
        }
        // A pause starts when the answer arrived; anything else is counted at admission time (a
        // bucket of the breaker's window is seconds wide), which spares a clock read.
        let now: Duration
        if case .status(let status, _) = observed, status != 429 && status != 503 {
            now = ticket.admittedAt
        } else {
            now = clock.elapsed()
        }
        var changes: [HostTraffic.Change] = []
        let handedTo = state.withLock { state -> UInt64? in
            absorbQuietCounts(&state, at: now)
            // An attempt admitted quietly found no slot: its host's is found now (made again if
            // it was forgotten meanwhile).
            guard let slot = ticket.slot ?? ticket.request.map({ slot(for: $0, in: &state, at: now) }) else { return nil }
            defer { refreshQuiet(slot, at: now) }
            return slot.traffic.finished(observed, progress: ticket.progress, at: now, changes: &changes)
        }
        hand(handedTo)
        publish(changes, key: ticket.key)
    }

    /// Whether the host's retry budget allows a retry of `request` (spending it when it does).
    ///
    /// - Parameter request: The request about to be retried.
    /// - Returns: `false` when the budget is spent: deliver the last outcome instead.
    package func allowsRetry(_ request: TransportRequest) -> Bool {
        let ticket = ticket(for: request, kind: .retry)
        guard ticket.isTracked else { return true }
        let now = clock.elapsed()
        var changes: [HostTraffic.Change] = []
        let allowed = state.withLock { state -> Bool in
            absorbQuietCounts(&state, at: now)
            return slot(for: request, in: &state, at: now).traffic.spendRetry(at: now, changes: &changes)
        }
        publish(changes, key: ticket.key)
        return allowed
    }

    // MARK: - State

    /// The state of one host, if the session has sent to it (and not forgotten it).
    ///
    /// - Parameter key: `host[:port]`, as the request's URL gives it.
    /// - Returns: The state.
    package func state(forHost key: String) -> HostTrafficState? {
        let now = clock.elapsed()
        return state.withLock { state in
            absorbQuietCounts(&state, at: now)
            return state.hosts[key.lowercased()].map { snapshot($0.traffic, key: key.lowercased(), now: now) }
        }
    }

    /// The state of every host the session remembers.
    package var states: [HostTrafficState] {
        let now = clock.elapsed()
        return state.withLock { state in
            absorbQuietCounts(&state, at: now)
            return state.hosts.map { snapshot($0.value.traffic, key: $0.key, now: now) }.sorted { $0.host < $1.host }
        }
    }

    /// How many hosts are remembered.
    package var hostCount: Int { state.withLock { $0.hosts.count } }

    private func snapshot(_ host: HostTraffic, key: String, now: Duration) -> HostTrafficState {
        let circuit: HostTrafficState.Circuit
        switch host.breaker?.state {
        case .open(let until)?: circuit = .open(until: clock.date(at: until))
        case .halfOpen?: circuit = .halfOpen
        case .closed?, nil: circuit = .closed
        }
        return HostTrafficState(
            host: key,
            policy: host.policy,
            rate: host.limiter.rate,
            isRateLowered: host.limiter.learned != nil,
            pausedUntil: host.limiter.pause(at: now).map { clock.date(at: $0) },
            circuit: circuit,
            retryBudgetLeft: host.budget?.left(at: now),
            inFlight: host.inFlight,
            waiting: host.waiters.count
        )
    }

    // MARK: - Helpers

    private func sweepIfDue(_ state: inout State, at now: Duration) {
        // At most once per interval, so that admission costs the same with 10 hosts or 10,000;
        // sooner only when the table has grown to twice its bound within one interval.
        guard now - state.lastSweep >= Self.sweepInterval || state.hosts.count >= 2 * Self.maximumHosts else { return }
        state.lastSweep = now
        state.sweeps += 1
        state.hosts = state.hosts.filter { !$0.value.traffic.isIdle(at: now, for: Self.idleTime) }
        if state.hosts.count > Self.maximumHosts {
            // Past the bound, the least recently used hosts that nobody is using go, whatever they
            // learned, down to three quarters of it (so the next sweep is not due at once).
            let unused = state.hosts.filter { $0.value.traffic.isUnused }
                .sorted { $0.value.traffic.lastUsed < $1.value.traffic.lastUsed }
            for (key, _) in unused.prefix(state.hosts.count - Self.maximumHosts * 3 / 4) {
                state.hosts[key] = nil
            }
        }
        if let recent = state.recentSlot, state.hosts[recent.key] !== recent { state.recentSlot = nil }
    }

    /// How many sweeps of the host table have run (for tests).
    package var sweepCount: Int { state.withLock { $0.sweeps } }

    /// The host's slot, made (with its policy) the first time the host is seen.
    private func slot(for request: TransportRequest, in state: inout State, at now: Duration) -> HostSlot {
        if let recent = state.recentSlot, request.hasSpelledAuthority(state.recentAuthority, isHTTPS: state.recentIsHTTPS) {
            return recent
        }
        let key = request.trafficKey
        let slot = slot(forKey: key, in: &state, at: now)
        let spelled = request.spelledAuthority
        state.recentSlot = slot
        state.recentAuthority = spelled.bytes
        state.recentIsHTTPS = spelled.isHTTPS
        if quietHostReference.load(ordering: .relaxed) == nil {
            // Under the lock: only one is ever made.
            let quiet = Unmanaged.passRetained(QuietHost(key: key, spelled: spelled, traffic: slot.traffic))
            quietHostReference.store(quiet, ordering: .releasing)
        }
        return slot
    }

    /// The slot of the host with `key`, made (with its policy) the first time it is seen.
    private func slot(forKey key: String, in state: inout State, at now: Duration) -> HostSlot {
        if let known = state.hosts[key] { return known }
        let slot = HostSlot(key: key, HostTraffic(policy: policy(forKey: key), at: now))
        state.hosts[key] = slot
        return slot
    }

    /// Hands what the quiet host counted without the lock to its state (made again if it was
    /// forgotten), before anything reads or changes any host's state. Under the lock.
    private func absorbQuietCounts(_ state: inout State, at now: Duration) {
        guard let quiet = quietHost else { return }
        let counts = quiet.take(at: now)
        guard counts.firstAttempts.count > 0 || counts.successes.count > 0 else { return }
        slot(forKey: quiet.key, in: &state, at: now).traffic.absorb(firstAttempts: counts.firstAttempts, successes: counts.successes)
    }

    /// After `slot`'s state changed (under the lock): whether its host, if it is the quiet host,
    /// may be admitted without the lock.
    private func refreshQuiet(_ slot: HostSlot, at now: Duration) {
        guard let quiet = quietHost, quiet.key == slot.key else { return }
        quiet.isQuiet.store(slot.traffic.isQuiet(at: now), ordering: .releasing)
    }

    /// The policy of a host, by its key (`host[:port]`).
    private func policy(forKey key: String) -> HostPolicy {
        var host = Substring(key)
        let bytes = key.utf8
        if bytes.first == UInt8(ascii: "[") {
            // An IPv6 literal: the name is between the brackets.
            if let close = bytes.firstIndex(of: UInt8(ascii: "]")) {
                host = key[bytes.index(after: bytes.startIndex)..<close]
            }
        } else if let colon = bytes.lastIndex(of: UInt8(ascii: ":")) {
            host = key[..<colon]
        }
        return policies.policy(authority: key, host: String(host))
    }

    private func hand(_ waiter: UInt64?) {
        guard let waiter else { return }
        let continuation = state.withLock { state -> UnsafeContinuation<Bool, Never>? in
            if let continuation = state.line.removeValue(forKey: waiter) { return continuation }
            state.handedOver.insert(waiter)
            return nil
        }
        continuation?.resume(returning: true)
    }

    private func error(for refusal: HostTraffic.Refusal, key: String) -> TransportError {
        var error: TransportError
        switch refusal {
        case .paused(let until):
            let date = clock.date(at: until)
            error = TransportError(
                .hostPaused,
                message: "\(key) asked every caller to wait until \(date.formatted(.iso8601)) (Retry-After), longer than this request may wait; it was not sent"
            )
            error.notBefore = date
        case .rateLimited(let until):
            let date = clock.date(at: until)
            error = TransportError(
                .rateLimited,
                message: "\(key)'s rate has no room for this request before \(date.formatted(.iso8601)), longer than it may wait; it was not sent"
            )
            error.notBefore = date
        case .concurrency(let cap):
            error = TransportError(
                .rateLimited,
                message: "\(key) already has \(cap) requests in flight (its cap) and none finished in time; this one was not sent"
            )
        case .circuitOpen(let until?):
            let date = clock.date(at: until)
            error = TransportError(
                .circuitOpen,
                message: "\(key)'s circuit breaker is open after repeated failures, until \(date.formatted(.iso8601)); the request was not sent"
            )
            error.notBefore = date
        case .circuitOpen(nil):
            error = TransportError(
                .circuitOpen,
                message: "\(key)'s circuit breaker is half-open and its probe request has not answered yet; the request was not sent"
            )
        }
        return error
    }

    private func publish(_ changes: [HostTraffic.Change], key: String) {
        for change in changes {
            let kind: TrafficEvent.Kind
            switch change {
            case .paused(let until, let status): kind = .paused(until: clock.date(at: until), status: status)
            case .rate(.lowered(let rate)): kind = .rateLowered(perSecond: rate)
            case .rate(.restored): kind = .rateRestored
            case .circuit(.opened(let until)): kind = .circuitOpened(until: clock.date(at: until))
            case .circuit(.halfOpened): kind = .circuitHalfOpened
            case .circuit(.closed): kind = .circuitClosed
            case .retryBudgetExhausted: kind = .retryBudgetExhausted
            }
            report(TrafficEvent(host: key, kind: kind))
        }
    }
}
