import FoundationEssentials
import HTTPTypes
import Logging

/// The retry shell: runs ``RetryEngine`` (a pure state machine) from the first attempt's outcome
/// until it says deliver, carrying out its waits, parking and retries, and the reachability
/// bookkeeping it reads.
extension Session {
    /// For a failure that means "no network", records the destination's reachability at once, on
    /// the thread that delivers the failure. The retry engine reads it later, after a hop to a
    /// task: by then the network may be back, and a failure it met while down must still park
    /// (spending no attempt) rather than count as a retry.
    func noteReachability(
        after result: Result<TransportResponse, TransportError>,
        of request: TransportRequest,
        lifecycle: RequestLifecycle
    ) {
        guard case .failure(let error) = result, RetryClassification.waitsForNetwork(error.kind) else { return }
        lifecycle.noteReachabilityAtFailure(reachability.status(for: request.host))
    }

    /// Whether the retry engine needs to look at this result (cheap: most results skip it).
    func mayRetry(
        _ result: Result<TransportResponse, TransportError>,
        prepared: PreparedRequest,
        lifecycle: RequestLifecycle
    ) -> Bool {
        let retryable = RetryClassification.mayRetry(result, configuration: prepared.retry)
        return retryable && !lifecycle.isCancelled  // the lock only when it matters
    }

    /// `failWhenNotReachable`: whether to fail at once, without sending, since the destination has
    /// no route. (A `Bool` first, the error only then: an optional error is a 121-byte copy.)
    func isUnreachable(_ request: TransportRequest, prepared: PreparedRequest) -> Bool {
        prepared.retry.failWhenNotReachable && reachability.status(for: request.host) == .unreachable
    }

    /// The refusal of a request ``isUnreachable(_:prepared:)`` holds back.
    func unreachableRefusal(_ request: TransportRequest) -> BrickError {
        BrickError(.notConnected, message: "\(request.host) is not reachable; the request was not sent")
    }

    /// Runs the retry engine from the outcome of the first attempt until it says deliver.
    ///
    /// Waits (backoff delays, parking) run in child tasks registered with the lifecycle, so
    /// `cancel()` ends them at once. The request's own `timeout` bounds the whole call, measured
    /// from `startedAt` (the first attempt's start on the session clock): no wait runs past it and
    /// each retry is sent with what is left of it.
    func retryLoop(
        _ prepared: PreparedRequest,
        request: TransportRequest,
        first: Result<TransportResponse, TransportError>,
        startedAt: Duration,
        lifecycle: RequestLifecycle
    ) async throws(BrickError) -> Result<TransportResponse, TransportError> {
        let callTimeout = request.options.timeout
        var engine = RetryEngine(
            configuration: prepared.retry,
            isIdempotent: request.isIdempotent,
            timeout: callTimeout,
            longestRetryAfter: traffic.longestRetryAfter(for: request)
        )
        let clock = self.clock
        var result = first
        // Retries after a transport failure or a network change never reuse a pooled connection:
        // it may be the dead one.
        var request = request
        let host = request.host
        // An attempt after parking is neither a first attempt nor a retry the budget paid for.
        var parkedLast = false
        while true {
            if lifecycle.isCancelled { return Self.cancelled(after: result) }
            let outcome: RetryEngine.Outcome
            var response: TransportResponse? = nil
            // The network matters only to a failure that means "no network": other outcomes cost
            // no route lookup.
            var status = ReachabilityStatus.unknown
            switch result {
            case .success(let arrived):
                let retryAfter = arrived.headerFields[.retryAfter].flatMap { RetryAfterParsing.delay($0, now: Date()) }
                outcome = .response(status: arrived.status.code, retryAfter: retryAfter)
                response = arrived
            case .failure(let error):
                outcome = .failure(error)
                if RetryClassification.waitsForNetwork(error.kind) || error.kind == .circuitOpen {
                    // The network as the failed attempt met it, if recorded (see `noteReachability`).
                    status = lifecycle.takeReachabilityAtFailure() ?? reachability.status(for: host)
                }
            }
            if let body = request.body, !body.canBeSentAgain {
                // A single-pass streamed body went out: the request cannot be sent again.
                return result
            }
            let action = engine.attemptFinished(
                outcome,
                elapsed: clock.elapsed() - startedAt,
                isReachable: status == .unknown ? nil : status == .reachable,
                response: response
            )
            parkedLast = action == .park
            // A retry (now or after a delay) must fit the host's retry budget.
            if action != .deliver && action != .park, !traffic.allowsRetry(request) {
                return overBudget(result, request: request, prepared: prepared)
            }
            switch action {
            case .deliver:
                if let declined = engine.declinedRetryAfter {
                    // Long waits belong to a durable queue: the caller sees the date and decides.
                    lifecycle.noteDeclinedRetry(until: Date().addingTimeInterval(declined.seconds))
                }
                if engine.retryCount > 0 || !engine.lastReason.isEmpty {
                    var metadata = Self.metadata(request, prepared)
                    metadata["brick.retry.reason"] = "\(engine.lastReason)"
                    prepared.logger.debug("retry engine delivers", metadata: metadata)
                }
                return result
            case .retry:
                guard lifecycle.retrying(engine.retryCount, startedAt: startedAt) else { continue }
            case .retryAfter(let delay):
                guard lifecycle.retrying(engine.retryCount, startedAt: startedAt) else { continue }
                var metadata = Self.metadata(request, prepared)
                metadata["brick.retry.delay"] = "\(delay)"
                metadata["brick.retry.reason"] = "\(engine.lastReason)"
                prepared.logger.debug("retrying after a delay", metadata: metadata)
                let sleeper = Task { try await clock.sleep(delay) }
                lifecycle.attach(TransportTask { sleeper.cancel() })
                _ = await sleeper.result
            case .park:
                guard lifecycle.parked() else { continue }
                prepared.observation?.requestDidPark()
                prepared.logger.debug("parked until the network returns", metadata: Self.metadata(request, prepared))
                let reachability = self.reachability
                let parker: Task<Void, Never>
                if let limit = engine.timeLimit {
                    // Parked no longer than the call's time limit: whichever comes first ends it.
                    let deadline = startedAt + limit
                    parker = Task {
                        await withTaskGroup(of: Void.self) { group in
                            group.addTask { await Self.waitUntilReachable(host, reachability) }
                            group.addTask { try? await clock.sleepUntilElapsed(deadline) }
                            await group.next()
                            group.cancelAll()
                        }
                    }
                } else {
                    parker = Task { await Self.waitUntilReachable(host, reachability) }
                }
                lifecycle.attach(TransportTask { parker.cancel() })
                await parker.value
            }
            if lifecycle.isCancelled { return Self.cancelled(after: result) }
            if let limit = engine.timeLimit, clock.elapsed() - startedAt > limit {
                // A wait ended past the call's time limit (a loaded machine): no attempt after it.
                return result
            }
            if let callTimeout {
                // Each retry gets what is left of the call's own timeout; none is left: the last
                // outcome is the call's.
                let remaining = callTimeout - (clock.elapsed() - startedAt)
                guard remaining > .zero else { return result }
                request.options.timeout = remaining
            }
            if case .failure(let error) = result {
                request.options.requiresFreshConnection = true
                // A download cut off mid-body continues from where it stopped.
                request.options.resumingDownload = error.partialDownload
            } else {
                request.options.resumingDownload = nil
            }
            if case .stream(let stream) = request.options.destination, let provide = stream.retryHeaders,
                let fields = try? TransportRequest.validatedFields(provide())
            {
                // A stream that can be continued says how (server-sent events' `Last-Event-ID`).
                request.headerFields = Self.replacing(request.headerFields, with: fields)
            }
            lifecycle.running()
            do throws(BrickError) {
                result = try await attempt(request, kind: parkedLast ? .replay : .retry, prepared: prepared, lifecycle: lifecycle)
            } catch {
                request.options.resumingDownload?.discard()
                throw error
            }
        }
    }

    /// The outcome of a request whose retry the host's retry budget refused: its last attempt's.
    private func overBudget(
        _ result: Result<TransportResponse, TransportError>,
        request: TransportRequest,
        prepared: PreparedRequest
    ) -> Result<TransportResponse, TransportError> {
        prepared.logger.debug("retry not made: the host's retry budget is spent", metadata: Self.metadata(request, prepared))
        return result
    }

    /// `fields` with `replacements` in place of any fields of the same names.
    static func replacing(_ fields: HTTPFields, with replacements: HTTPFields) -> HTTPFields {
        var fields = fields
        for field in replacements { fields[field.name] = nil }
        fields.append(contentsOf: replacements)
        return fields
    }

    /// The outcome of a request cancelled between attempts; a partial download the last attempt
    /// kept is deleted.
    private static func cancelled(
        after result: Result<TransportResponse, TransportError>
    ) -> Result<
        TransportResponse, TransportError
    > {
        if case .failure(let error) = result { error.partialDownload?.discard() }
        return .failure(TransportError(.cancelled, message: "cancelled"))
    }

    private static func waitUntilReachable(_ host: String, _ reachability: any ReachabilityMonitor) async {
        let changes = reachability.changes()
        if reachability.status(for: host) != .unreachable { return }
        for await _ in changes where reachability.status(for: host) != .unreachable {
            return
        }
    }
}
