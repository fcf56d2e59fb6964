import FoundationEssentials
import Logging

// How a session runs a request. The verbs, from the outside in; each means this and nothing else:
//
// - **execute** (`execute(_:lifecycle:handler:)`): the callback entry point. Starts a prepared
//   request and calls a handler with its outcome, once, through the callback queue.
// - **perform** (`perform(_:lifecycle:early:)`): the async entry point. Runs a prepared request in
//   the caller's task and returns its outcome.
// - **run** (`run(_:request:lifecycle:)`, and `runCached` in Session+Cache.swift): the life of an
//   admitted request — its exchange, then validation (`finish`).
// - **exchange** (`exchange(_:request:lifecycle:)`): the attempts and retries of one request, up
//   to the transport's last result (Session+Retry.swift).
// - **attempt** (`attempt(_:prepared:lifecycle:)`): one try, signed by the authenticator and
//   replayed once after a `401` refresh (Session+Authentication.swift).
// - **send** (`send(_:lifecycle:)`): one call to the transport.
//
// Elsewhere in the library: a transport *starts* a transfer; the driver *begins* it on a handle
// and *completes* it.

/// One run of a request through ``Session/execute(_:lifecycle:handler:)``: everything the
/// transport's completion and the callback queue need, in one object, so that the closures
/// between them capture only it (a closure whose one capture is an object allocates nothing).
final class Exchange: Sendable {
    let prepared: PreparedRequest
    let request: TransportRequest
    let lifecycle: RequestLifecycle
    let handler: @Sendable (Outcome) -> Void
    /// The first attempt's admission by the host's traffic policy.
    let ticket: TrafficControl.Ticket
    /// When the first attempt started, on the session clock: the request's own timeout and
    /// `maxTotalDuration` run from here.
    let startedAt: Duration

    /// The session that runs it (the prepared request's: one reference fewer to count).
    var session: Session { prepared.session }

    init(
        prepared: PreparedRequest,
        request: TransportRequest,
        lifecycle: RequestLifecycle,
        ticket: TrafficControl.Ticket,
        startedAt: Duration,
        handler: @escaping @Sendable (Outcome) -> Void
    ) {
        self.prepared = prepared
        self.request = request
        self.lifecycle = lifecycle
        self.ticket = ticket
        self.handler = handler
        self.startedAt = startedAt
    }

    /// Starts the first attempt on the transport.
    func start() {
        // The closure's only capture is the exchange, which serves as its context: no allocation.
        let task = session.transport.start(request) { [self] result in transportDidComplete(result) }
        // The first attempt's: ignored if its completion already began a retry (attach's note).
        lifecycle.attach(task, attempt: 0)
    }

    /// The transport's completion of the first attempt.
    func transportDidComplete(_ result: Result<TransportResponse, TransportError>) {
        session.traffic.finished(ticket, result)
        attemptDidEnd(result)
    }

    /// The first attempt's result (or its refusal by the traffic policy): delivered, or retried.
    func attemptDidEnd(_ result: Result<TransportResponse, TransportError>) {
        // Fast path: a result the retry engine would deliver anyway goes straight to the handler.
        guard session.mayRetry(result, prepared: prepared, lifecycle: lifecycle) else {
            session.callbacks.submit(self, result)
            return
        }
        session.noteReachability(after: result, of: request, lifecycle: lifecycle)
        Task { [self] in
            // No authenticator on this path, so the loop cannot fail with an authentication error.
            let final =
                (try? await session.retryLoop(prepared, request: request, first: result, startedAt: startedAt, lifecycle: lifecycle))
                ?? result
            session.callbacks.submit(self, final)
        }
    }

    /// Validates `result` and hands the outcome to the handler; on the callback queue.
    func deliver(_ result: consuming Result<TransportResponse, TransportError>) {
        handler(session.finish(prepared, request: request, result: result, lifecycle: lifecycle))
    }
}

extension Session {
    /// Runs a prepared request and calls `handler` once, through the callback queue.
    @usableFromInline
    func execute(
        _ prepared: consuming PreparedRequest,
        lifecycle: RequestLifecycle,
        handler: @escaping @Sendable (Outcome) -> Void
    ) {
        let admitted = admit(prepared, lifecycle: lifecycle) { outcome in
            guard let outcome else {
                logger.warning("resume() on a request that already ran or was cancelled; ignored")
                return
            }
            callbacks.submit { handler(outcome) }
        }
        guard let request = admitted else { return }
        if prepared.isCached, let caching = prepared.caching {
            // The cache's store and rules run around the exchange, in a task.
            let prepared = copy prepared
            Task { [self] in
                let callbacks = self.callbacks
                let response = await runCached(
                    prepared,
                    caching: caching,
                    request: request,
                    lifecycle: lifecycle,
                    early: { early in callbacks.submit { handler(early) } }
                )
                callbacks.submit { handler(response) }
            }
            return
        }
        if prepared.authenticator != nil || prepared.observation != nil || prepared.webhook != nil {
            // Signing needs the credential provider (async), a webhook is signed afresh at each
            // attempt, and instruments see each attempt before and after it: run the whole
            // exchange in a task.
            let prepared = copy prepared
            Task { [self] in
                let response = await run(prepared, request: request, lifecycle: lifecycle)
                callbacks.submit { handler(response) }
            }
            return
        }
        willStart(request, prepared)
        // The ticket stays here while the host's policy decides, then moves into the exchange.
        var ticket = traffic.ticket(for: request, kind: .first)
        switch traffic.advance(&ticket) {
        case .proceed:
            begin(consume ticket, refusal: nil, consume prepared, request: request, lifecycle: lifecycle, handler: handler)
        case .refuse(let error):
            begin(.untracked, refusal: error, consume prepared, request: request, lifecycle: lifecycle, handler: handler)
        case .wait(let admission):
            // The host's policy makes the first attempt wait: in a task. The call's time runs from
            // now, the wait included.
            let prepared = copy prepared
            let arrived = ticket.admittedAt
            Task { [self, ticket] in
                switch await traffic.admit(continuing: ticket, from: admission, lifecycle: lifecycle) {
                case .success(let admitted):
                    begin(admitted, refusal: nil, prepared, request: request, lifecycle: lifecycle, startedAt: arrived, handler: handler)
                case .failure(let error):
                    begin(.untracked, refusal: error, prepared, request: request, lifecycle: lifecycle, startedAt: arrived, handler: handler)
                }
            }
        }
    }

    /// The first attempt of a callback request, once the host's policy decided: started with
    /// `ticket`, or its `refusal` delivered (through the same path as a transport failure).
    private func begin(
        _ ticket: consuming TrafficControl.Ticket,
        refusal: TransportError?,
        _ prepared: consuming PreparedRequest,
        request: TransportRequest,
        lifecycle: RequestLifecycle,
        startedAt: Duration? = nil,
        handler: @escaping @Sendable (Outcome) -> Void
    ) {
        // Traffic control read the clock when it admitted the first attempt: no second read.
        let started = startedAt ?? (ticket.isTracked ? ticket.admittedAt : clock.elapsed())
        let exchange = Exchange(
            prepared: consume prepared,
            request: request,
            lifecycle: lifecycle,
            ticket: consume ticket,
            startedAt: started,
            handler: handler
        )
        if let refusal {
            exchange.attemptDidEnd(.failure(refusal))
        } else {
            exchange.start()
        }
    }

    /// Runs a prepared request on the caller's executor; cancelling the task cancels the transfer.
    /// `early` receives a delivery that comes before the last (the stored response of
    /// ``CachePolicy/cacheThenNetwork``); the returned outcome is the last.
    @usableFromInline
    nonisolated(nonsending) func perform(
        _ prepared: PreparedRequest,
        lifecycle: RequestLifecycle,
        early: (@Sendable (Outcome) -> Void)? = nil
    ) async -> Outcome {
        var finished: Outcome? = nil
        let admitted = admit(prepared, lifecycle: lifecycle) { finished = $0 }
        guard let request = admitted else {
            let error = BrickError(.cancelled, message: "the request already ran or was cancelled")
            return finished ?? .failed(error, request: nil)
        }
        let outcome =
            if prepared.isCached, let caching = prepared.caching {
                await runCached(prepared, caching: caching, request: request, lifecycle: lifecycle, early: early)
            } else {
                await run(prepared, request: request, lifecycle: lifecycle)
            }
        // Progress reports go through the callback queue: let them all run before the caller
        // resumes, as they do before a `response(_:)` handler.
        if request.options.progress != nil { await callbacks.flush() }
        return outcome
    }

    /// The checks before the first attempt, shared by both entry points: a request runs once, a
    /// rendering error is delivered, and `failWhenNotReachable` refuses an unreachable destination.
    ///
    /// - Returns: The request to send; `nil` when the call ended before sending, after `finished`
    ///   received the outcome to deliver (`nil`: the request had already run). (A request, not an
    ///   enum with an outcome in it: the common answer then costs one reference, not an outlined
    ///   copy of a 200-byte payload.)
    private func admit(
        _ prepared: borrowing PreparedRequest,
        lifecycle: RequestLifecycle,
        finished: (Outcome?) -> Void
    ) -> TransportRequest? {
        guard lifecycle.begin(registeringIn: running) else {
            finished(nil)
            return nil
        }
        let request: TransportRequest
        switch prepared.rendering {
        case .failure(let error):
            _ = lifecycle.complete()
            report(renderError: error.value)
            finished(.failed(error.value, request: nil))
            return nil
        case .request(let rendered):
            request = rendered
        }
        if isUnreachable(request, prepared: prepared) {
            _ = lifecycle.complete()
            finished(.failed(unreachableRefusal(request), request: request))
            return nil
        }
        return request
    }

    /// The whole exchange: attempts, retries, and the final validation and serialization.
    nonisolated(nonsending) func run(
        _ prepared: PreparedRequest,
        request: TransportRequest,
        lifecycle: RequestLifecycle
    ) async -> Outcome {
        willStart(request, prepared)
        switch await exchange(prepared, request: request, lifecycle: lifecycle) {
        case .success(let outcome):
            return finish(prepared, request: request, result: outcome, lifecycle: lifecycle)
        case .failure(let error):
            _ = lifecycle.complete()
            return .failed(error, request: request, retryCount: lifecycle.retryCount)
        }
    }

    /// The attempts and retries of one request, up to the transport's last result (before
    /// validation); fails only when authentication does. Cancelling the task cancels it.
    nonisolated(nonsending) func exchange(
        _ prepared: PreparedRequest,
        request: TransportRequest,
        lifecycle: RequestLifecycle
    ) async -> Result<Result<TransportResponse, TransportError>, BrickError> {
        await withTaskCancellationHandler {
            () async -> Result<Result<TransportResponse, TransportError>, BrickError> in
            do throws(BrickError) {
                let startedAt = clock.elapsed()
                let first = try await attempt(request, kind: .first, prepared: prepared, lifecycle: lifecycle)
                guard mayRetry(first, prepared: prepared, lifecycle: lifecycle) else { return .success(first) }
                return .success(
                    try await retryLoop(prepared, request: request, first: first, startedAt: startedAt, lifecycle: lifecycle)
                )
            } catch {
                return .failure(error)
            }
        } onCancel: {
            lifecycle.cancel()
        }
    }

    /// Delivers a cancellation to a handler whose request was cancelled before it started.
    @usableFromInline
    func deliverCancellation(to handler: @escaping @Sendable (Outcome) -> Void) {
        callbacks.submit { handler(.failed(.cancelled, request: nil)) }
    }

    func willStart(_ request: TransportRequest, _ prepared: borrowing PreparedRequest) {
        if prepared.logsRequests {
            let metadata = Self.metadata(request, prepared)
            prepared.logger.debug("request started", metadata: metadata)
        }
        for monitor in eventMonitors { monitor.requestDidStart(request) }
    }

    /// The structured metadata of a request's log entries, with OpenTelemetry's names: method,
    /// URL without its query, and the endpoint's operation name.
    static func metadata(_ request: TransportRequest, _ prepared: borrowing PreparedRequest) -> Logger.Metadata {
        var metadata: Logger.Metadata = [
            "http.request.method": "\(request.method)", "url.full": "\(request.redactedURL)",
        ]
        if let operation = prepared.operationName { metadata["brick.operation"] = "\(operation)" }
        return metadata
    }

    /// Runs `log`, the entry for a request's outcome, in its instruments' context (the last
    /// attempt's span: ``RequestObserver/withLogContext(_:)``).
    static func log(_ prepared: borrowing PreparedRequest, _ log: () -> Void) {
        if let observation = prepared.observation { observation.withLogContext(log) } else { log() }
    }

    private func report(renderError error: BrickError) {
        // The caller gets the error; a library logs it only for those who ask (debug).
        logger.debug("request could not be rendered", metadata: ["error.message": "\(error)"])
        for monitor in eventMonitors { monitor.requestDidFailToRender(error) }
    }

    /// Completion and validation of one outcome (serialization follows in ``Outcome/response(_:)``);
    /// runs where the handler runs (the callback queue), or in the awaiting task.
    func finish(
        _ prepared: PreparedRequest,
        request: TransportRequest,
        result: consuming Result<TransportResponse, TransportError>,
        lifecycle: RequestLifecycle
    ) -> Outcome {
        let (completed, retries, retriedSince, declinedRetryDate) = lifecycle.completeCountingRetries()
        let retriedFor = retriedSince.map { clock.elapsed() - $0 }
        let wasCancelled = !completed
        for monitor in eventMonitors { monitor.request(request, didCompleteWith: result) }
        // Consumed: the response moves into the outcome instead of being copied.
        switch consume result {
        case .failure(let error):
            // A download that will not be tried again leaves no partial file behind.
            error.partialDownload?.discard()
            var brickError =
                wasCancelled || error.kind == .cancelled
                ? BrickError(.cancelled, message: "the request was cancelled", underlying: error)
                : BrickError.transport(error)
            brickError.retriesBefore = retries
            brickError.retriedFor = retriedFor
            if prepared.logsRequests, brickError.code != .cancelled {
                // The caller gets the error; a library logs it only for those who ask (debug).
                // Held back by the host's policy: the change itself was logged once, at info.
                var metadata = Self.metadata(request, prepared)
                metadata["error.type"] = "\(error.kind)"
                metadata["error.message"] = "\(error)"
                let heldBack = NetworkFailure.of(error.kind) == .heldBack
                Self.log(prepared) {
                    prepared.logger.debug(
                        heldBack ? "request held back by the host's traffic policy" : "request failed",
                        metadata: metadata
                    )
                }
            }
            return .failed(brickError, request: request, retryCount: retries)
        case .success(let response):
            if prepared.logsRequests {
                var metadata = Self.metadata(request, prepared)
                metadata["http.response.status_code"] = "\(response.status.code)"
                // The last attempt's, in seconds, as the metric of that name counts it.
                metadata["http.client.request.duration"] = "\(response.metrics.total.seconds)"
                Self.log(prepared) { prepared.logger.debug("request finished", metadata: metadata) }
            }
            do throws(BrickError) {
                if let validation = prepared.validation { try validation.validate(response) }
                var outcome = Outcome(request: request, ending: .validated(response), retryCount: retries)
                outcome.notBefore = declinedRetryDate
                return outcome
            } catch {
                var error = error
                error.retriesBefore = retries
                error.retriedFor = retriedFor
                if let declinedRetryDate { error.serverNotBefore = declinedRetryDate }
                var outcome = Outcome(request: request, ending: .failed(error, response), retryCount: retries)
                outcome.notBefore = declinedRetryDate
                return outcome
            }
        }
    }
}
