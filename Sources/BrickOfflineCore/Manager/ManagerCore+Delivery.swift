import BrickRequest
import Foundation
import Logging
import Synchronization

/// The manager's delivery policy: one attempt of a stored request (read back, asked of the
/// delegate, performed under its time limit, its outcome decided by ``ManagerDecision`` and written),
/// and what ``DeliveryLoop`` asks (head of line at cap 1).
extension ManagerCore {
    // MARK: - One attempt

    /// One attempt of a leased entry (``DeliveryPolicy``): read back, asked of the delegate,
    /// performed under its time limit, its outcome written.
    func attempt(_ entry: OfflineEntry) async {
        // A manager that was dropped (or shut down) starts nothing: its delegate could not be asked.
        // The lease lapses, or is voided when the store opens again.
        guard let lease = entry.lease?.token, !state.withLock({ $0.stopped }), owner.value != nil else { return }
        let request: any OfflineRequest
        switch decode(entry) {
        case .success(let decoded):
            request = decoded
        case .failure(.unregistered(let kind)):
            // Waits for its type: paused (not attempted, not counted) until `register` makes it due.
            let record = OfflineEntry.AttemptRecord(date: now(), status: nil, error: "not attempted: kind \(kind.debugDescription) is not registered")
            await leasedWrite("keep an entry of an unregistered kind", entry.id) { store in
                try await store.reschedule(
                    entry.id, lease: lease, notBefore: self.now().addingTimeInterval(Self.unregisteredPause.seconds),
                    attempt: record, countsAttempt: false
                )
            }
            // Registered meanwhile: due now after all.
            if isRegistered(kind) { await makePausedDue() }
            return
        case .failure(.damaged(let reason)):
            await leasedWrite("set an unreadable request aside", entry.id) { store in
                try await store.bury(entry.id, lease: lease, reason: reason, attempt: nil, countsAttempt: false)
            }
            finishOutstanding()
            events.emit(.failed(entry.id, error: reason))
            settled.emit(())
            return
        }
        let delegate = settings.withLock { $0.delegate.value }
        let manager = owner.value
        if let delegate, let manager, !delegate.offlineRequestManager(manager, shouldAttempt: request) {
            // Vetoed: stays queued, looked at again after the submission interval.
            let later = now().addingTimeInterval(settings.withLock { $0.submissionInterval }.seconds)
            let record = OfflineEntry.AttemptRecord(date: now(), status: nil, error: "not attempted (vetoed)")
            await leasedWrite("keep a vetoed request", entry.id) { store in
                try await store.reschedule(entry.id, lease: lease, notBefore: later, attempt: record, countsAttempt: false)
            }
            return
        }
        let limit = settings.withLock { $0.timeLimit }
        let generation = state.withLock { state -> Int in
            state.running[entry.id] = Running(deadline: session.clock.elapsed() + limit, generation: state.generation)
            return state.generation
        }
        events.emit(.started(entry.id, kind: type(of: request).kind))
        if let delegate, let manager { delegate.offlineRequestManager(manager, didStart: request) }
        updateProgress()
        await perform(request, entry: entry, generation: generation)
    }

    private func perform(_ request: any OfflineRequest, entry: OfflineEntry, generation: Int) async {
        let id = entry.id
        let context = OfflineRequestContext(
            id: id,
            session: session,
            onProgress: { [weak self] fraction in
                guard let self else { return }
                self.state.withLock { $0.running[id]?.progress = fraction }
                self.updateProgress()
            },
            onHeartbeat: { [weak self] in
                guard let self else { return }
                let limit = self.settings.withLock { $0.timeLimit }
                let deadline = self.session.clock.elapsed() + limit
                self.state.withLock { $0.running[id]?.deadline = deadline }
            }
        )
        // The lease is kept while the attempt runs, however long its heartbeats let it.
        let keeper = leaseKeeper.keep(
            id,
            duration: leaseDuration,
            token: { [weak self] in self?.loop.lease(of: id) },
            report: { [weak self] (failure: String) in self?.report(failure) }
        )
        let outcome = await attempt(request, context: context, id: id)
        // The lease is kept until the outcome is written: a slow write must not let it lapse.
        var keeping = true
        defer { if keeping { keeper.stop() } }
        // An attempt abandoned by `clearAllRequests` changes nothing.
        guard state.withLock({ $0.generation == generation }) else { return }
        // A stop's grace period ended while it ran: the loop hands the entry back.
        if loop.isHandingBack(id) {
            state.withLock { $0.running[id] = nil }
            updateProgress()
            return
        }
        guard let lease = loop.lease(of: id) else { return }
        let delegate = settings.withLock { $0.delegate.value }
        let manager = owner.value
        let finishedAt = now()
        let heldBackUntil: Date? =
            if case .failure(let error) = outcome { session.heldBackDate(for: error, now: finishedAt) } else { nil }
        let decision = ManagerDecision.decide(
            outcome,
            now: finishedAt,
            heldBackUntil: heldBackUntil,
            submissionInterval: settings.withLock { $0.submissionInterval }
        ) { error in
            request.shouldAttemptResubmission(for: error)
                || (delegate.flatMap { delegate in
                    manager.map { delegate.offlineRequestManager($0, shouldReattempt: request, after: error) }
                } ?? false)
        }
        let record = { @Sendable (error: String) in OfflineEntry.AttemptRecord(date: self.now(), status: nil, error: error) }
        // Until its events are out, an outcome is not settled: `waitUntilEmpty` must not return
        // between the store's write and the event (a subscriber would miss it after `close()`).
        keeper.settle()
        state.withLock { $0.settling += 1 }
        keeping = false
        defer {
            keeper.stop()
            state.withLock { $0.settling -= 1 }
            settled.emit(())
        }
        switch decision {
        case .finished:
            await leasedWrite("remove a finished request", id) { store in try await store.complete(id, lease: lease) }
            state.withLock { state in
                state.running[id] = nil
                state.completed += 1
            }
            finishOutstanding()
            if let delegate, let manager { delegate.offlineRequestManager(manager, didFinish: request) }
            events.emit(.finished(id))
        case .keep(let later, let reason):
            await leasedWrite("keep a request for later", id) { store in
                try await store.reschedule(id, lease: lease, notBefore: later, attempt: record(reason), countsAttempt: false)
            }
            state.withLock { $0.running[id] = nil }
            updateProgress()
            events.emit(.kept(id, error: reason))
        case .again(let reason):
            await leasedWrite("attempt a request again", id) { store in
                try await store.reschedule(id, lease: lease, notBefore: self.now(), attempt: record(reason), countsAttempt: true)
            }
            state.withLock { $0.running[id] = nil }
            updateProgress()
        case .fail(let reason):
            await leasedWrite("set a failed request aside", id) { store in
                try await store.bury(id, lease: lease, reason: reason, attempt: record(reason), countsAttempt: true)
            }
            state.withLock { $0.running[id] = nil }
            finishOutstanding()
            if case .failure(let error) = outcome, let delegate, let manager {
                delegate.offlineRequestManager(manager, didFail: request, with: error)
            }
            events.emit(.failed(id, error: reason))
        }
    }

    /// Performs the request under its time limit: the first of its end and the deadline wins.
    /// Performs the request under its time limit: the first of its end, the deadline and the
    /// cancellation of the attempt (a stop's grace period ended) wins.
    private func attempt(_ request: any OfflineRequest, context: OfflineRequestContext, id: OfflineEntry.ID) async
        -> Result<Void, any Error>
    {
        typealias Outcome = Result<Void, any Error>
        let decision = Lock<(continuation: CheckedContinuation<Outcome, Never>?, decided: Outcome?)>((nil, nil))
        let decide: @Sendable (Outcome) -> Void = { result in
            let continuation = decision.withLock { decision -> CheckedContinuation<Outcome, Never>? in
                guard decision.decided == nil else { return nil }
                decision.decided = result
                defer { decision.continuation = nil }
                return decision.continuation
            }
            continuation?.resume(returning: result)
        }
        let work = Task {
            do {
                try await request.perform(context)
                decide(.success(()))
            } catch {
                decide(.failure(error))
            }
        }
        let clock = session.clock
        let watchdog = Task { [weak self] in
            while let self, !Task.isCancelled {
                guard let deadline = self.state.withLock({ $0.running[id]?.deadline }) else { return }
                if clock.elapsed() >= deadline {
                    // Decided first: the cancelled work's own error must not win the race.
                    decide(.failure(OfflineRequestTimeout()))
                    work.cancel()
                    return
                }
                do { try await clock.sleepUntilElapsed(deadline) } catch { return }
            }
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
                let decided = decision.withLock { decision -> Outcome? in
                    if decision.decided == nil { decision.continuation = continuation }
                    return decision.decided
                }
                if let decided { continuation.resume(returning: decided) }
            }
        } onCancel: {
            decide(.failure(CancellationError()))
            work.cancel()
        }
        watchdog.cancel()
        return result
    }
}

extension ManagerCore: DeliveryPolicy {
    var cap: Int { settings.withLock { $0.cap } }
    var leaseRetryInterval: Duration { settings.withLock { $0.submissionInterval } }

    func willLease() async {
        // The store's count is read once, before the first lease (see `loadOutstanding`).
        await loadOutstanding()
    }

    /// With attempts running, the loop waits for one to end. Head of line (cap 1): the head's due
    /// date, not any entry's — a later entry due now while the head waits out a pause would make
    /// the loop spin.
    func idle(anyRunning: Bool, headOfLine: Bool) async -> Date? {
        guard !anyRunning else { return nil }
        return await reporting("find the next due request") { store, queue in
            try await headOfLine ? store.nextHeadDue(queue: queue) : store.nextDue(queue: queue)
        } ?? nil
    }

    func reachabilityChanged() {
        events.emit(.connectivityChanged)
    }

    func report(storeFailure: String) { report(storeFailure) }
}
