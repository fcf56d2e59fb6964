import BrickRequest
import Foundation
import HTTPTypes
import Logging
import Synchronization

/// The queue's delivery policy: one attempt of an entry (signed, sent through the session's traffic
/// policy, its outcome decided by ``DeliveryDecision`` and written), and what ``DeliveryLoop`` asks.
extension QueueCore {
    // MARK: - One attempt

    func attempt(_ entry: OfflineEntry) async {
        guard entry.lease?.token != nil else { return }
        let started = now()
        if DeliveryDecision.isExpired(entry, now: started) {
            await apply(.deadLetter(reason: "expired before it could be delivered", countsAttempt: false), to: entry, attempt: nil, response: nil)
            return
        }
        let stored: StoredRequest
        do {
            stored = try StoredRequest.decoded(entry.payload)
        } catch {
            await apply(.deadLetter(reason: "the stored request cannot be read: \(error)", countsAttempt: false), to: entry, attempt: nil, response: nil)
            return
        }
        // Keep the lease while the request runs, so that it is never leased again under it.
        let keeper = leaseKeeper.keep(
            entry.id,
            duration: leaseDuration,
            token: { [weak self] in self?.loop.lease(of: entry.id) },
            report: { [weak self] (description: String) in self?.report(storeFailure: description) }
        )
        let (outcome, response) = await send(stored, idempotencyKey: entry.idempotencyKey, attemptsBefore: entry.attempts)
        // A stop's grace period ended while it ran: the loop hands the entry back.
        if loop.isHandingBack(entry.id) {
            keeper.stop()
            return
        }
        let finished = now()
        let record = OfflineEntry.AttemptRecord(
            date: finished,
            status: response.map { $0.status.code },
            error: {
                switch outcome {
                case .status(let code): return (200..<300).contains(code) ? nil : "status \(code)"
                case .transport(let kind): return "transport failure: \(kind)"
                case .unreadable(let why), .authentication(let why), .heldBack(_, let why), .egressRefused(let why):
                    return why
                }
            }()
        )
        let decision = DeliveryDecision.decide(
            outcome,
            attemptsBefore: entry.attempts,
            maxAttempts: entry.maxAttempts,
            expiresAt: entry.expiresAt,
            now: finished,
            retryInterval: retryInterval
        )
        // The lease is kept until the outcome is written: a slow write must not let it lapse.
        keeper.settle()
        await apply(decision, to: entry, attempt: record, response: response, keeper: keeper)
    }

    /// Sends the stored request once, signed; on a `401` with an authenticator, refreshes and
    /// sends once more.
    private func send(
        _ stored: StoredRequest,
        idempotencyKey: String,
        attemptsBefore: Int
    ) async -> (AttemptOutcome, TransportResponse?) {
        var replayed = false
        while true {
            var generation = 0
            var credential: [String: String] = [:]
            if let authenticator {
                do {
                    (credential, generation) = try await authenticator.credential()
                } catch {
                    return (.authentication("\(error)"), nil)
                }
            }
            var request: TransportRequest
            do {
                request = try stored.transportRequest(idempotencyKey: idempotencyKey, credential: credential)
                if let webhookSigner {
                    // Signed at send time, afresh each attempt; the secret never reaches the store.
                    request = try request.signedAsWebhook(by: webhookSigner, id: idempotencyKey, date: now())
                }
            } catch {
                return (.unreadable("\(error)"), nil)
            }
            // The status decides the delivery; the body is kept only while it fits the limit, so a
            // 2xx with a body too large for it is still a delivery (never sent again).
            let capture = ResponseCapture(limit: request.options.maxResponseSize ?? ResponseCapture.defaultLimit)
            request.options.destination = .stream(capture.stream)
            // The capture enforces the endpoint's limit itself; the transport's would fail the attempt.
            request.options.maxResponseSize = nil
            do {
                // Through the session's traffic policy: a host paused by a 429 is not sent to.
                let response = capture.response(from: try await session.sendThroughTrafficControl(request, attemptsBefore: attemptsBefore))
                if response.status.code == 401, let authenticator, !replayed {
                    replayed = true
                    do {
                        try await authenticator.refresh(after: generation)
                    } catch {
                        return (.authentication("the credential could not be refreshed: \(error)"), response)
                    }
                    continue
                }
                return (.status(response.status.code), response)
            } catch {
                // Stopped by the capture once the body outgrew the limit: the status stands.
                if let response = capture.responseWithoutBody(after: error) {
                    return (.status(response.status.code), response)
                }
                if NetworkFailure.of(error.kind) == .heldBack {
                    return (.heldBack(until: session.heldBackDate(for: error, now: now()), reason: error.message), nil)
                }
                if error.kind == .egressRefused { return (.egressRefused(error.message), nil) }
                return (.transport(error.kind), nil)
            }
        }
    }

    private func apply(
        _ decision: DeliveryDecision,
        to entry: OfflineEntry,
        attempt: OfflineEntry.AttemptRecord?,
        response: TransportResponse?,
        keeper: LeaseKeeper.Running? = nil
    ) async {
        // The keeper stops once the outcome is written, before the queue may be seen settled
        // (below); on an early return, here.
        defer { keeper?.stop() }
        guard let lease = loop.lease(of: entry.id) ?? entry.lease?.token else { return }
        // Until its event is out, an outcome is not settled: `waitUntilEmpty` must not return
        // between the store's write and the event (a subscriber would miss it after `close`).
        state.withLock { $0.settling += 1 }
        do {
            switch decision {
            case .delivered:
                if try await !store.complete(entry.id, lease: lease) { report(leaseLost: entry.id) }
                // The server answers again: every paused entry is due now, not at the end of its pause.
                if claimPauseClear() { try await store.clearPauses(queue: name, now: now()) }
                emit(.delivered(entry.id, status: response?.status.code ?? 200))
                if let response { finish(entry.id, .success(response)) }
            case .retry(let notBefore, let countsAttempt, let reason):
                let held = try await store.reschedule(
                    entry.id,
                    lease: lease,
                    notBefore: notBefore,
                    attempt: attempt ?? OfflineEntry.AttemptRecord(date: now(), status: nil, error: reason),
                    countsAttempt: countsAttempt
                )
                if !held { report(leaseLost: entry.id) }
                state.withLock { $0.pausedSinceClear = true }
                emit(.paused(entry.id, until: notBefore, reason: reason))
            case .deadLetter(let reason, let countsAttempt):
                if try await !store.bury(entry.id, lease: lease, reason: reason, attempt: attempt, countsAttempt: countsAttempt) {
                    report(leaseLost: entry.id)
                }
                emit(.deadLettered(entry.id, reason: reason))
                logger.warning(
                    "offline entry set aside",
                    metadata: ["brick.entry.id": "\(entry.id)", "brick.reason": "\(reason)"]
                )
                finish(entry.id, .failure(BrickError(.storage, message: "set aside as a dead letter: \(reason)")))
            }
        } catch {
            report(storeFailure: error)
        }
        keeper?.stop()
        state.withLock { $0.settling -= 1 }
        await publishCount()
    }

    private func finish(_ id: OfflineEntry.ID, _ result: Result<TransportResponse, BrickError>) {
        let completion = state.withLock { $0.completions.removeValue(forKey: id) }
        completion?(result)
    }

    private func report(storeFailure error: any Error) {
        report(storeFailure: "\(error)")
    }

    func report(storeFailure description: String) {
        logger.warning("offline store failed", metadata: ["error.message": "\(description)"])
        emit(.storeFailed(description))
    }

    /// The store refused a write because this attempt's lease was no longer held (it lapsed and the
    /// entry was leased again): what this attempt learned is not recorded; the holder's attempt is.
    private func report(leaseLost id: OfflineEntry.ID) {
        report(storeFailure: "the lease of \(id) was lost before its attempt ended; its outcome was not recorded")
    }
}

extension QueueCore: DeliveryPolicy {
    var leaseRetryInterval: Duration { retryInterval }

    func willLease() async {}

    func idle(anyRunning: Bool, headOfLine: Bool) async -> Date? {
        // With attempts running, each publishes the count once it has emitted its event: a count
        // published here could reach 0 between an attempt's removal and its event.
        if !anyRunning { await publishCount() }
        return try? await store.nextDue(queue: name)
    }

    func reachabilityChanged() {}
}
