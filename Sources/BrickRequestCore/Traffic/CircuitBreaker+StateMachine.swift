/// A host's circuit breaker: a pure state machine (``CircuitBreakerPolicy`` says the rules; times
/// are the session clock's elapsed time).
///
/// | state | event | next state | the attempt |
/// |---|---|---|---|
/// | closed | admit | closed | goes |
/// | closed | failure, ≥ `minimumRequests` in the window and failures ≥ `failureRatio` | open until now + `breakDuration` | — |
/// | closed | success, neutral outcome, or too few outcomes | closed | — |
/// | open | admit before `until` | open | refused, "open until `until`" |
/// | open | admit at or after `until` | half-open, probe out | goes, as the probe |
/// | half-open, probe out | admit | half-open | refused, "a probe is out" |
/// | half-open, probe out | the probe succeeds | closed, window cleared | — |
/// | half-open, probe out | the probe fails | open until now + `breakDuration` | — |
/// | half-open, probe out | the probe ends neutral (cancelled, `4xx`, held back) | half-open, no probe out | — |
/// | half-open, no probe out | admit | half-open, probe out | goes, as the probe |
/// | open or half-open | an attempt admitted before the breaker opened ends | unchanged | — |
package struct CircuitBreaker: Sendable, Hashable {
    /// Where the breaker stands.
    package enum State: Sendable, Hashable {
        /// Attempts go; outcomes are counted.
        case closed
        /// Attempts are refused until the date.
        case open(until: Duration)
        /// One attempt (the probe) tests the host; `probeOut` while it runs.
        case halfOpen(probeOut: Bool)
    }

    /// What an attempt gets.
    package enum Admission: Sendable, Hashable {
        /// Go.
        case allow
        /// Go, as the probe of a half-open breaker: its outcome decides.
        case probe
        /// Refused: the breaker is open until `until`, or (`nil`) a probe is out.
        case refuse(until: Duration?)
    }

    /// How an attempt ended, as the breaker counts it.
    package enum Verdict: Sendable, Hashable {
        /// The server answered (any status but a counted `5xx`).
        case success
        /// A network-class failure or a counted `5xx`.
        case failure
        /// Says nothing about the host (cancelled, offline, held back, a `429`).
        case neutral
    }

    /// A change of state, for events and logs.
    package enum Change: Sendable, Hashable {
        case opened(until: Duration)
        case halfOpened
        case closed
    }

    /// The rules.
    package let policy: CircuitBreakerPolicy
    /// The state.
    package private(set) var state: State = .closed
    private var successes: SlidingWindow
    private var failures: SlidingWindow

    /// A closed breaker.
    ///
    /// - Parameter policy: The rules.
    package init(policy: CircuitBreakerPolicy) {
        self.policy = policy
        successes = SlidingWindow(length: policy.window)
        failures = SlidingWindow(length: policy.window)
    }

    /// Whether the breaker is closed.
    package var isClosed: Bool { state == .closed }

    /// Admits an attempt, or refuses it.
    ///
    /// - Parameter now: The time.
    /// - Returns: The admission, and the change it made (open → half-open).
    package mutating func admit(at now: Duration) -> (Admission, Change?) {
        switch state {
        case .closed:
            return (.allow, nil)
        case .open(let until) where now < until:
            return (.refuse(until: until), nil)
        case .open:
            state = .halfOpen(probeOut: true)
            return (.probe, .halfOpened)
        case .halfOpen(probeOut: true):
            return (.refuse(until: nil), nil)
        case .halfOpen(probeOut: false):
            state = .halfOpen(probeOut: true)
            return (.probe, nil)
        }
    }

    /// Records `count` successes of attempts that were not probes, counted outside the lock
    /// (``HostTraffic/absorb(firstAttempts:successes:)``): as many ``record(_:wasProbe:at:)`` of a
    /// success. Only a closed breaker counts them.
    ///
    /// - Parameters:
    ///   - count: How many.
    ///   - now: When (their bucket).
    package mutating func recordSuccesses(_ count: Int, at now: Duration) {
        guard count > 0, state == .closed else { return }
        successes.add(count, at: now)
    }

    /// Records how an attempt ended.
    ///
    /// - Parameters:
    ///   - verdict: The outcome as the breaker counts it.
    ///   - wasProbe: Whether the attempt was the probe.
    ///   - now: The time.
    /// - Returns: The change it made, if any.
    package mutating func record(_ verdict: Verdict, wasProbe: Bool, at now: Duration) -> Change? {
        if wasProbe, case .halfOpen = state {
            switch verdict {
            case .success:
                state = .closed
                successes.reset()
                failures.reset()
                return .closed
            case .failure:
                return open(at: now)
            case .neutral:
                state = .halfOpen(probeOut: false)
                return nil
            }
        }
        guard state == .closed else { return nil }
        switch verdict {
        case .success:
            successes.add(at: now)
            return nil
        case .neutral:
            return nil
        case .failure:
            failures.add(at: now)
            let failed = failures.total(at: now)
            let total = failed + successes.total(at: now)
            guard total >= policy.minimumRequests, Double(failed) >= policy.failureRatio * Double(total) else {
                return nil
            }
            return open(at: now)
        }
    }

    private mutating func open(at now: Duration) -> Change {
        let until = now + policy.breakDuration
        state = .open(until: until)
        successes.reset()
        failures.reset()
        return .opened(until: until)
    }
}
