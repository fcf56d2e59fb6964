import FoundationEssentials
import Logging

/// What a session needs to run one request, apart from its serializer: the rendered request (or
/// why rendering failed), the validation, the retry configuration and the authenticator.
/// `Sendable`, built on the caller's side. Not generic, like the whole session pipeline: only the
/// last step, ``Outcome/response(_:)``, knows the value type, so running a request instantiates
/// no generic types at run time. A value: an ``Exchange`` stores it inline (one allocation per
/// request fewer); functions borrow it.
@usableFromInline
struct PreparedRequest: Sendable {
    /// The session that runs it: the request's own, or its replacement in this task
    /// (``Session/withReplacement(_:isolation:operation:)``).
    @usableFromInline let session: Session
    let rendered: Result<TransportRequest, BrickError>
    let validation: ResponseValidation?
    var retry: AutoRetryConfiguration
    let authenticator: Authenticator?
    let caching: ResponseCaching?

    @usableFromInline
    init(_ request: some RequestType) {
        let session = request.session.resolved
        self.session = session
        do {
            rendered = .success(try RequestRenderer.render(request, session: session, startsRequest: true))
        } catch {
            rendered = .failure(error)
        }
        validation = request.responseValidation
        retry = request.autoRetryConfiguration
        authenticator = request.requestAuthenticator
        caching = request.responseCaching
    }
}

/// How a request ended, before serialization.
@usableFromInline
struct Outcome: Sendable {
    @usableFromInline
    enum Ending: Sendable {
        /// A response that passed validation: to be serialized.
        case validated(TransportResponse)
        /// Why the request failed, with the response when one arrived (it failed validation).
        case failed(BrickError, TransportResponse?)
    }

    /// The rendered request, or `nil` when rendering failed.
    @usableFromInline var request: TransportRequest?
    @usableFromInline var ending: Ending
    @usableFromInline var retryCount: Int = 0
    /// Where the response came from, and what the cache knows of it.
    @usableFromInline var source: ResponseSource = .network
    @usableFromInline var isStale = false
    @usableFromInline var age: Duration?

    /// A failure before or without a response.
    static func failed(_ error: BrickError, request: TransportRequest?, retryCount: Int = 0) -> Outcome {
        Outcome(request: request, ending: .failed(error, nil), retryCount: retryCount)
    }

    /// The typed response: serializes a validated response with `serializer`. Inlinable, so that
    /// it is specialized for the endpoint's value type where the endpoint is declared (no generic
    /// metadata lookup per response).
    @inlinable
    func response<Value: Sendable>(_ serializer: any ResponseSerializer<Value>) -> Response<Value, BrickError> {
        switch ending {
        case .validated(let response):
            let result: Result<Value, BrickError>
            do throws(BrickError) {
                result = .success(try serializer.serialize(response))
            } catch {
                result = .failure(error)
            }
            return Response(
                request: request,
                result: result,
                transportResponse: response,
                retryCount: retryCount,
                source: source,
                isStale: isStale,
                age: age
            )
        case .failed(let error, let response):
            return Response(
                request: request,
                result: .failure(error),
                transportResponse: response,
                retryCount: retryCount,
                source: source,
                isStale: isStale,
                age: age
            )
        }
    }
}

/// One run of a request through ``Session/execute(_:lifecycle:handler:)``: everything the
/// transport's completion and the callback queue need, in one object, so that the closures
/// between them capture only it (a closure whose one capture is an object allocates nothing).
final class Exchange: Sendable {
    let session: Session
    let prepared: PreparedRequest
    let request: TransportRequest
    let lifecycle: RequestLifecycle
    let handler: @Sendable (Outcome) -> Void

    init(
        session: Session,
        prepared: PreparedRequest,
        request: TransportRequest,
        lifecycle: RequestLifecycle,
        handler: @escaping @Sendable (Outcome) -> Void
    ) {
        self.session = session
        self.prepared = prepared
        self.request = request
        self.lifecycle = lifecycle
        self.handler = handler
    }

    /// The transport's completion of the first attempt.
    func transportDidComplete(_ result: Result<TransportResponse, TransportError>) {
        // Fast path: a result the retry engine would deliver anyway goes straight to the handler.
        guard session.mayRetry(result, prepared: prepared, lifecycle: lifecycle) else {
            session.callbacks.submit(self, result)
            return
        }
        session.noteReachability(after: result, of: request, lifecycle: lifecycle)
        Task { [self] in
            // No authenticator on this path, so the loop cannot fail with an authentication error.
            let final =
                (try? await session.retryLoop(prepared, request: request, first: result, lifecycle: lifecycle))
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
        let request: TransportRequest
        switch admit(prepared, lifecycle: lifecycle) {
        case .proceed(let rendered):
            request = rendered
        case .finished(let response):
            guard let response else {
                logger.warning("resume() on a request that already ran or was cancelled; ignored")
                return
            }
            callbacks.submit { handler(response) }
            return
        }
        if let caching = prepared.caching {
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
        if prepared.authenticator != nil {
            // Signing needs the credential provider (async): run the whole exchange in a task.
            let prepared = copy prepared
            Task { [self] in
                let response = await run(prepared, request: request, lifecycle: lifecycle)
                callbacks.submit { handler(response) }
            }
            return
        }
        willStart(request)
        let exchange = Exchange(
            session: self,
            prepared: prepared,
            request: request,
            lifecycle: lifecycle,
            handler: handler
        )
        // The closure's only capture is the exchange, which serves as its context: no allocation.
        let task = transport.start(request) { [exchange] result in exchange.transportDidComplete(result) }
        lifecycle.attach(task)
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
        switch admit(prepared, lifecycle: lifecycle) {
        case .proceed(let request):
            let outcome =
                if let caching = prepared.caching {
                    await runCached(prepared, caching: caching, request: request, lifecycle: lifecycle, early: early)
                } else {
                    await run(prepared, request: request, lifecycle: lifecycle)
                }
            // Progress reports go through the callback queue: let them all run before the caller
            // resumes, as they do before a `response(_:)` handler.
            if request.options.progress != nil { await callbacks.flush() }
            return outcome
        case .finished(let outcome):
            let error = BrickError(.cancelled, message: "the request already ran or was cancelled")
            return outcome ?? .failed(error, request: nil)
        }
    }

    private enum Admission {
        /// Send this request.
        case proceed(TransportRequest)
        /// Done before sending: deliver this outcome (`nil`: the request had already run).
        case finished(Outcome?)
    }

    /// The checks before the first attempt, shared by both entry points: a request runs once, a
    /// rendering error is delivered, and `failWhenNotReachable` refuses an unreachable destination.
    private func admit(_ prepared: PreparedRequest, lifecycle: RequestLifecycle) -> Admission {
        guard lifecycle.begin(registeringIn: running) else { return .finished(nil) }
        switch prepared.rendered {
        case .failure(let error):
            _ = lifecycle.complete()
            report(renderError: error)
            return .finished(.failed(error, request: nil))
        case .success(let request):
            if let refusal = refuseIfUnreachable(request, prepared: prepared) {
                _ = lifecycle.complete()
                return .finished(.failed(refusal, request: request))
            }
            return .proceed(request)
        }
    }

    /// The whole exchange: attempts, retries, and the final validation and serialization.
    nonisolated(nonsending) func run(
        _ prepared: PreparedRequest,
        request: TransportRequest,
        lifecycle: RequestLifecycle
    ) async -> Outcome {
        willStart(request)
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
                let first = try await attempt(request, prepared: prepared, lifecycle: lifecycle)
                guard mayRetry(first, prepared: prepared, lifecycle: lifecycle) else { return .success(first) }
                return .success(try await retryLoop(prepared, request: request, first: first, lifecycle: lifecycle))
            } catch {
                return .failure(error)
            }
        } onCancel: {
            lifecycle.cancel()
        }
    }

    /// One attempt. With an authenticator: signs the request with the current credential, and on a
    /// `401` refreshes the credential (once, shared with concurrent requests) and replays once.
    private func attempt(
        _ request: TransportRequest,
        prepared: PreparedRequest,
        lifecycle: RequestLifecycle
    ) async throws(BrickError) -> Result<TransportResponse, TransportError> {
        guard let authenticator = prepared.authenticator else {
            return await send(request, lifecycle: lifecycle)
        }
        var generation = try await signAndSend(request, authenticator, lifecycle)
        guard case .success(let response) = generation.result, response.status == .unauthorized, !lifecycle.isCancelled
        else {
            return generation.result
        }
        do {
            try await authenticator.refresh(after: generation.generation)
        } catch {
            throw BrickError(.authenticationFailed, message: "the credential could not be refreshed", underlying: error)
        }
        generation = try await signAndSend(request, authenticator, lifecycle)
        return generation.result
    }

    private func signAndSend(
        _ request: TransportRequest,
        _ authenticator: Authenticator,
        _ lifecycle: RequestLifecycle
    ) async throws(BrickError) -> (result: Result<TransportResponse, TransportError>, generation: Int) {
        let credential: (headers: [String: String], generation: Int)
        do {
            credential = try await authenticator.credential()
        } catch {
            throw BrickError(.authenticationFailed, message: "no credential is available", underlying: error)
        }
        var signed = request
        do {
            let fields = try TransportRequest.validatedFields(credential.headers.map { ($0.key, $0.value) })
            signed.headerFields = Self.replacing(signed.headerFields, with: fields)
        } catch {
            throw BrickError(.authenticationFailed, message: "the credential has an invalid header", underlying: error)
        }
        return (await send(signed, lifecycle: lifecycle), credential.generation)
    }

    /// One attempt, registered with the lifecycle so `cancel()` stops it.
    private func send(
        _ request: TransportRequest,
        lifecycle: RequestLifecycle
    ) async -> Result<
        TransportResponse, TransportError
    > {
        let transport = self.transport
        return await withUnsafeContinuation {
            (continuation: UnsafeContinuation<Result<TransportResponse, TransportError>, Never>) in
            let task = transport.start(request) { result in
                self.noteReachability(after: result, of: request, lifecycle: lifecycle)
                continuation.resume(returning: result)
            }
            lifecycle.attach(task)
        }
    }

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

    /// `failWhenNotReachable`: fail at once, without sending, when the destination has no route.
    private func refuseIfUnreachable(
        _ request: TransportRequest,
        prepared: PreparedRequest
    )
        -> BrickError?
    {
        guard prepared.retry.failWhenNotReachable, reachability.status(for: request.host) == .unreachable else {
            return nil
        }
        return BrickError(.notConnected, message: "\(request.host) is not reachable; the request was not sent")
    }

    /// Runs the retry engine from the outcome of the first attempt until it says deliver.
    ///
    /// Waits (backoff delays, parking) run in child tasks registered with the lifecycle, so
    /// `cancel()` ends them at once.
    func retryLoop(
        _ prepared: PreparedRequest,
        request: TransportRequest,
        first: Result<TransportResponse, TransportError>,
        lifecycle: RequestLifecycle
    ) async throws(BrickError) -> Result<TransportResponse, TransportError> {
        var engine = RetryEngine(configuration: prepared.retry, isIdempotent: request.isIdempotent)
        var result = first
        // Retries after a transport failure or a network change never reuse a pooled connection:
        // it may be the dead one.
        var request = request
        let host = request.host
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
                if RetryClassification.waitsForNetwork(error.kind) {
                    // The network as the failed attempt met it, if recorded (see `noteReachability`).
                    status = lifecycle.takeReachabilityAtFailure() ?? reachability.status(for: host)
                }
            }
            let action = engine.attemptFinished(
                outcome,
                elapsed: clock.elapsed(),
                isReachable: status == .unknown ? nil : status == .reachable,
                response: response
            )
            switch action {
            case .deliver:
                if engine.retryCount > 0 || !engine.lastReason.isEmpty {
                    logger.debug(
                        "retry engine delivers",
                        metadata: ["url": "\(request.urlString)", "reason": "\(engine.lastReason)"]
                    )
                }
                return result
            case .retry:
                guard lifecycle.retrying(engine.retryCount) else { continue }
            case .retryAfter(let delay):
                guard lifecycle.retrying(engine.retryCount) else { continue }
                logger.debug(
                    "retrying after a delay",
                    metadata: ["url": "\(request.urlString)", "delay": "\(delay)", "reason": "\(engine.lastReason)"]
                )
                let clock = self.clock
                let sleeper = Task { try await clock.sleep(delay) }
                lifecycle.attach(TransportTask { sleeper.cancel() })
                _ = await sleeper.result
            case .park:
                guard lifecycle.parked() else { continue }
                logger.debug("parked until the network returns", metadata: ["url": "\(request.urlString)"])
                let reachability = self.reachability
                let parker = Task { await Self.waitUntilReachable(host, reachability) }
                lifecycle.attach(TransportTask { parker.cancel() })
                await parker.value
            }
            if lifecycle.isCancelled { return Self.cancelled(after: result) }
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
                result = try await attempt(request, prepared: prepared, lifecycle: lifecycle)
            } catch {
                request.options.resumingDownload?.discard()
                throw error
            }
        }
    }

    /// `fields` with `replacements` in place of any fields of the same names.
    private static func replacing(_ fields: HTTPFields, with replacements: HTTPFields) -> HTTPFields {
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

    /// Delivers a cancellation to a handler whose request was cancelled before it started.
    @usableFromInline
    func deliverCancellation(to handler: @escaping @Sendable (Outcome) -> Void) {
        callbacks.submit { handler(.failed(.cancelled, request: nil)) }
    }

    func willStart(_ request: TransportRequest) {
        if logsRequests {
            logger.debug(
                "request started",
                metadata: ["method": "\(request.method)", "url": "\(request.urlString)"]
            )
        }
        for monitor in eventMonitors { monitor.requestDidStart(request) }
    }

    private func report(renderError error: BrickError) {
        logger.warning("request could not be rendered", metadata: ["error": "\(error)"])
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
        let (completed, retries) = lifecycle.completeCountingRetries()
        let wasCancelled = !completed
        for monitor in eventMonitors { monitor.request(request, didCompleteWith: result) }
        // Consumed: the response moves into the outcome instead of being copied.
        switch consume result {
        case .failure(let error):
            // A download that will not be tried again leaves no partial file behind.
            error.partialDownload?.discard()
            let brickError =
                wasCancelled || error.kind == .cancelled
                ? BrickError(.cancelled, message: "the request was cancelled", underlying: error)
                : BrickError.transport(error)
            if brickError.code != .cancelled {
                logger.warning(
                    "request failed",
                    metadata: ["method": "\(request.method)", "url": "\(request.urlString)", "error": "\(error)"]
                )
            }
            return .failed(brickError, request: request, retryCount: retries)
        case .success(let response):
            if logsRequests {
                logger.debug(
                    "request finished",
                    metadata: [
                        "method": "\(request.method)", "url": "\(request.urlString)",
                        "status": "\(response.status.code)",
                    ]
                )
            }
            do throws(BrickError) {
                if let validation = prepared.validation { try validation.validate(response) }
                return Outcome(request: request, ending: .validated(response), retryCount: retries)
            } catch {
                return Outcome(request: request, ending: .failed(error, response), retryCount: retries)
            }
        }
    }
}
