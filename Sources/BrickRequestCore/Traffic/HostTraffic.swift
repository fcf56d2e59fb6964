/// Everything a session knows about one host's traffic, and the decisions made from it: a pure
/// value composed of the three state machines (``RateLimiter``, ``CircuitBreaker``,
/// ``RetryBudget``) and the host's concurrency. ``TrafficControl`` is its shell: it holds one per
/// host under a lock, waits where this says wait, and reports the changes.
///
/// An attempt is admitted in this order, each step once (``Progress`` remembers what it passed, so
/// that an attempt that waited and comes back is not charged twice):
///
/// | step | holds it back when | waits (within its deadline) | refused with |
/// |---|---|---|---|
/// | circuit breaker | open, or half-open with its probe out | never | ``Refusal/circuitOpen(until:)`` |
/// | pause | the server asked for one (`Retry-After`) | until its end | ``Refusal/paused(until:)`` |
/// | rate | no token | until its reserved token is due | ``Refusal/rateLimited(until:)`` |
/// | concurrency | the cap is reached | in line, until a slot is handed over | ``Refusal/concurrency(cap:)`` |
package struct HostTraffic: Sendable {
    /// Which attempt of a request this is: only first attempts earn retry budget, only retries
    /// spend it.
    package enum AttemptKind: Sendable, Hashable {
        /// The request's first attempt.
        case first
        /// A retry (its budget was spent when the retry was decided).
        case retry
        /// A replay that is neither (after a `401` refresh, or after waiting parked for the network).
        case replay
    }

    /// What an attempt has passed so far, and holds.
    package struct Progress: Sendable, Hashable {
        /// Past the circuit breaker.
        package var passedBreaker = false
        /// Admitted as the half-open breaker's probe.
        package var isProbe = false
        /// Holds a token (taken or reserved).
        package var hasToken = false
        /// Holds a concurrency slot.
        package var holdsSlot = false
        /// Counted as a first attempt.
        package var counted = false
        /// Admitted: on its way to the server (its outcome is expected).
        package var admitted = false
        /// Admitted without the lock, while the host was quiet (``HostTraffic/isQuiet(at:)``): its
        /// first attempt was counted outside this state, and it is not in ``HostTraffic/active``.
        package var admittedQuietly = false

        package init() {}
    }

    /// Why an attempt was not admitted.
    package enum Refusal: Sendable, Hashable {
        /// The server asked for a pause until then.
        case paused(until: Duration)
        /// The host's rate has no token for the attempt before then.
        case rateLimited(until: Duration)
        /// The host's concurrency cap was reached and no slot came in time.
        case concurrency(cap: Int)
        /// The breaker is open until then, or (`nil`) half-open with its probe out.
        case circuitOpen(until: Duration?)
    }

    /// What the shell does with an attempt.
    package enum Admission: Sendable, Hashable {
        /// Send it.
        case proceed
        /// Wait until then, and ask again.
        case wait(until: Duration)
        /// Wait in line for a concurrency slot (the attempt was put in line), and ask again.
        case queued
        /// Do not send it.
        case refuse(Refusal)
    }

    /// How an attempt ended, as traffic control sees it.
    package enum Observed: Sendable, Hashable {
        /// A response with this status and `Retry-After` delay.
        case status(Int, retryAfter: Duration?)
        /// A transport failure of this kind.
        case failure(TransportError.Kind)
        /// Nothing was sent (cancelled while waiting, refused after passing the breaker).
        case notSent
    }

    /// A change worth an event and a log line.
    package enum Change: Sendable, Hashable {
        case paused(until: Duration, status: Int)
        case rate(RateLimiter.Change)
        case circuit(CircuitBreaker.Change)
        case retryBudgetExhausted
    }

    /// How far back the rate actually sent is measured (the starting point of a cut when no rate
    /// is configured).
    package static let sendingRateSpan: Duration = .seconds(2)

    /// The policy in force.
    package let policy: HostPolicy
    /// The rate, the pause and what was learned.
    package private(set) var limiter: RateLimiter
    /// The breaker, when the policy has one.
    package private(set) var breaker: CircuitBreaker?
    /// The retry budget, when the policy has one.
    package private(set) var budget: RetryBudget?
    /// Whether ``breaker`` is set: testing the optional itself copies the whole breaker.
    private let hasBreaker: Bool
    /// Whether ``budget`` is set (its windows then give the rate sent, and ``sent`` is unused).
    private let hasBudget: Bool
    private var sent: SlidingWindow
    /// Attempts holding a concurrency slot.
    package private(set) var inFlight = 0
    /// Attempts admitted whose outcome has not come (whatever the cap): a host with any is kept.
    package private(set) var active = 0
    /// Attempts in line for a slot, first first.
    package private(set) var waiters: [UInt64] = []
    /// When an attempt last came or went.
    package private(set) var lastUsed: Duration

    /// A host seen for the first time at `now`.
    ///
    /// - Parameters:
    ///   - policy: Its policy.
    ///   - now: The time.
    package init(policy: HostPolicy, at now: Duration) {
        self.policy = policy
        limiter = RateLimiter(configured: policy.rate)
        breaker = policy.circuitBreaker.map(CircuitBreaker.init(policy:))
        budget = policy.retryBudget.map(RetryBudget.init(policy:))
        hasBreaker = policy.circuitBreaker != nil
        hasBudget = policy.retryBudget != nil
        sent = SlidingWindow(length: Self.sendingRateSpan)
        lastUsed = now
    }

    /// Takes an attempt through the steps it has not passed yet.
    ///
    /// - Parameters:
    ///   - kind: Which attempt of its request this is.
    ///   - progress: What the attempt passed and holds; updated.
    ///   - now: The time.
    ///   - deadline: The latest the attempt may wait until, or `nil` to fail rather than wait.
    ///   - waitsOutPauses: Whether a pause is waited out (within the deadline) or refused at once.
    ///   - waiter: The attempt's number, should it have to wait in line.
    ///   - changes: Receives the changes made.
    /// - Returns: What to do with it.
    package mutating func admit(
        _ kind: AttemptKind,
        progress: inout Progress,
        at now: Duration,
        deadline: Duration?,
        waitsOutPauses: Bool = true,
        waiter: UInt64,
        changes: inout [Change]
    ) -> Admission {
        lastUsed = now
        if !progress.passedBreaker, hasBreaker, let (admission, change) = breaker?.admit(at: now) {
            if let change { changes.append(.circuit(change)) }
            switch admission {
            case .allow: break
            case .probe: progress.isProbe = true
            case .refuse(let until): return .refuse(.circuitOpen(until: until))
            }
        }
        progress.passedBreaker = true
        if let pause = limiter.pause(at: now) {
            guard waitsOutPauses, let deadline, pause <= deadline else {
                abandon(&progress, at: now, changes: &changes)
                return .refuse(.paused(until: pause))
            }
            return .wait(until: pause)
        }
        if !progress.hasToken {
            switch limiter.reserve(at: now, maxWait: deadline.map { max(.zero, $0 - now) } ?? .zero) {
            case .now:
                progress.hasToken = true
            case .after(let wait):
                progress.hasToken = true
                return .wait(until: now + wait)
            case .refused(let until):
                abandon(&progress, at: now, changes: &changes)
                return .refuse(.rateLimited(until: until))
            }
        }
        if let cap = policy.maximumConcurrentRequests, !progress.holdsSlot {
            if inFlight < cap && waiters.isEmpty {
                inFlight += 1
                progress.holdsSlot = true
            } else if deadline == nil {
                abandon(&progress, at: now, changes: &changes)
                return .refuse(.concurrency(cap: cap))
            } else {
                waiters.append(waiter)
                return .queued
            }
        }
        if kind == .first, !progress.counted {
            progress.counted = true
            budget?.firstAttempt(at: now)
        }
        if !hasBudget { sent.add(at: now) }
        progress.admitted = true
        active += 1
        return .proceed
    }

    /// Whether nothing about the host can hold a first attempt back or learn from its success: no
    /// rate (configured or learned), no pause, no concurrency cap, and the breaker (if any)
    /// closed. While it holds, traffic control admits the host's first attempts and counts their
    /// successes without its lock, and hands the counts over later
    /// (``absorb(firstAttempts:successes:)``): admitting one here would only count it.
    ///
    /// - Parameter now: The time.
    package func isQuiet(at now: Duration) -> Bool {
        policy.maximumConcurrentRequests == nil && waiters.isEmpty && limiter.rate == nil
            && limiter.pause(at: now) == nil && (!hasBreaker || breaker?.isClosed == true)
    }

    /// The window a first attempt is counted in (the budget's, or the span of the rate sent).
    package var firstAttemptWindow: Duration {
        policy.retryBudget?.window ?? Self.sendingRateSpan
    }

    /// The window a success is counted in: the breaker's, or `nil` when nothing counts it.
    package var successWindow: Duration? {
        policy.circuitBreaker?.window
    }

    /// Takes in what was counted outside the lock while the host was quiet: first attempts
    /// admitted (each as ``admit(_:progress:at:deadline:waitsOutPauses:waiter:changes:)`` of a
    /// first attempt that was not held back counts it) and successes of them (as
    /// ``finished(_:progress:at:changes:)`` counts a success). Each count comes with the start of
    /// its bucket.
    ///
    /// - Parameters:
    ///   - firstAttempts: How many first attempts, and when.
    ///   - successes: How many successes, and when.
    package mutating func absorb(firstAttempts: (count: Int, at: Duration), successes: (count: Int, at: Duration)) {
        if firstAttempts.count > 0 {
            lastUsed = max(lastUsed, firstAttempts.at)
            if hasBudget {
                budget?.firstAttempt(firstAttempts.count, at: firstAttempts.at)
            } else {
                sent.add(firstAttempts.count, at: firstAttempts.at)
            }
        }
        if successes.count > 0 {
            lastUsed = max(lastUsed, successes.at)
            if hasBreaker { breaker?.recordSuccesses(successes.count, at: successes.at) }
        }
    }

    /// A waiter whose time ran out (or was cancelled) leaves the line.
    ///
    /// - Parameter waiter: Its number.
    /// - Returns: `true` when it was still in line; `false` when a slot was handed to it meanwhile
    ///   (it holds one now).
    package mutating func leaveLine(_ waiter: UInt64) -> Bool {
        guard let index = waiters.firstIndex(of: waiter) else { return false }
        waiters.remove(at: index)
        return true
    }

    /// An attempt ended: releases its slot and learns from its outcome.
    ///
    /// - Parameters:
    ///   - observed: How it ended.
    ///   - progress: What it held.
    ///   - now: The time.
    ///   - changes: Receives the changes made.
    /// - Returns: The waiter the slot was handed to, if any (the shell wakes it).
    package mutating func finished(
        _ observed: Observed,
        progress: Progress,
        at now: Duration,
        changes: inout [Change]
    ) -> UInt64? {
        lastUsed = now
        if progress.admitted { active -= 1 }
        let handedTo = releaseSlot(progress)
        if hasBreaker, progress.passedBreaker,
            let change = breaker?.record(Self.verdict(observed), wasProbe: progress.isProbe, at: now) ?? nil
        {
            changes.append(.circuit(change))
        }
        guard policy.learnsFromServer, case .status(let status, let retryAfter) = observed else { return handedTo }
        switch (status, retryAfter) {
        case (429, let delay?), (503, let delay?):
            if limiter.pause(until: now + delay) { changes.append(.paused(until: now + delay, status: status)) }
        case (429, nil):
            let recent = budget?.attempts(over: Self.sendingRateSpan, at: now) ?? sent.total(at: now)
            let rate = Double(recent) / Self.sendingRateSpan.seconds
            if let change = limiter.throttled(at: now, sendingRate: rate) { changes.append(.rate(change)) }
        case (200..<400, _):
            if let change = limiter.succeeded(at: now) { changes.append(.rate(change)) }
        default:
            break
        }
        return handedTo
    }

    /// An attempt admitted in part that will not be sent (refused at a later step, or cancelled
    /// while waiting): gives back its slot and its probe.
    ///
    /// - Parameters:
    ///   - progress: What it held; cleared.
    ///   - now: The time.
    ///   - changes: Receives the changes made.
    /// - Returns: The waiter the slot was handed to, if any.
    @discardableResult
    package mutating func abandon(_ progress: inout Progress, at now: Duration, changes: inout [Change]) -> UInt64? {
        let handedTo = releaseSlot(progress)
        if progress.isProbe, hasBreaker, let change = breaker?.record(.neutral, wasProbe: true, at: now) ?? nil {
            changes.append(.circuit(change))
        }
        progress = Progress()
        return handedTo
    }

    /// Decides whether a retry may be made, spending budget when it may.
    ///
    /// - Parameters:
    ///   - now: The time.
    ///   - changes: Receives ``Change/retryBudgetExhausted`` the first time in a run it refuses.
    /// - Returns: Whether the retry may be made.
    package mutating func spendRetry(at now: Duration, changes: inout [Change]) -> Bool {
        guard let (allowed, newlyExhausted) = budget?.spend(at: now) else { return true }
        if newlyExhausted { changes.append(.retryBudgetExhausted) }
        return allowed
    }

    /// Whether the host can be forgotten: nothing in flight or in line, nothing learned, the
    /// breaker closed, and unused for `idleTime`.
    ///
    /// - Parameters:
    ///   - now: The time.
    ///   - idleTime: How long unused.
    package func isIdle(at now: Duration, for idleTime: Duration) -> Bool {
        isUnused && now - lastUsed >= idleTime && limiter.isAtRest(at: now)
            && (!hasBreaker || breaker?.isClosed == true)
    }

    /// Whether nothing is in flight or in line for the host (it may be evicted when the session
    /// keeps too many hosts).
    package var isUnused: Bool {
        active == 0 && inFlight == 0 && waiters.isEmpty
    }

    /// How the breaker counts an outcome: network-class failures (the server could not be reached,
    /// or the connection broke) and `5xx` (but a `503` with `Retry-After`, which pauses instead)
    /// are failures; any other response is a success; a `429`, a cancellation, an offline
    /// failure and anything not sent say nothing about the host.
    ///
    /// - Parameter observed: The outcome.
    /// - Returns: The verdict.
    package static func verdict(_ observed: Observed) -> CircuitBreaker.Verdict {
        switch observed {
        case .status(429, _), .status(503, .some):
            return .neutral
        case .status(let status, _):
            return (500..<600).contains(status) ? .failure : .success
        case .failure(let kind):
            return NetworkFailure.of(kind) == .unreachable ? .failure : .neutral
        case .notSent:
            return .neutral
        }
    }

    private mutating func releaseSlot(_ progress: Progress) -> UInt64? {
        guard progress.holdsSlot else { return nil }
        if !waiters.isEmpty { return waiters.removeFirst() }  // the slot passes to the first in line
        inFlight -= 1
        return nil
    }
}
