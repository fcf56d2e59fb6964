import FoundationEssentials
import HTTPTypes
import Logging

/// One attempt of a request: signed by its authenticator when it has one, with one refresh and
/// replay on a `401`; and the transport call itself.
extension Session {
    /// One attempt. With an authenticator: signs the request with the current credential, and on a
    /// `401` refreshes the credential (once, shared with concurrent requests) and replays once.
    func attempt(
        _ request: TransportRequest,
        kind: HostTraffic.AttemptKind,
        prepared: PreparedRequest,
        lifecycle: RequestLifecycle
    ) async throws(BrickError) -> Result<TransportResponse, TransportError> {
        var request = request
        if let webhook = prepared.webhook?.value {
            // Each attempt signed afresh: a new timestamp, the same id.
            request = try request.signedAsWebhook(by: webhook.signer, id: webhook.id, date: clock.date(at: clock.elapsed()))
        }
        guard let authenticator = prepared.authenticator else {
            return await send(request, kind: kind, lifecycle: lifecycle, observation: prepared.observation)
        }
        var generation = try await signAndSend(request, kind, authenticator, lifecycle, prepared.observation)
        guard case .success(let response) = generation.result, response.status == .unauthorized, !lifecycle.isCancelled,
            request.body?.canBeSentAgain ?? true
        else {
            return generation.result
        }
        do {
            try await authenticator.refresh(after: generation.generation)
        } catch {
            throw BrickError(.authenticationFailed, message: "the credential could not be refreshed", underlying: error)
        }
        generation = try await signAndSend(request, .replay, authenticator, lifecycle, prepared.observation)
        return generation.result
    }

    private func signAndSend(
        _ request: TransportRequest,
        _ kind: HostTraffic.AttemptKind,
        _ authenticator: Authenticator,
        _ lifecycle: RequestLifecycle,
        _ observation: Observation?
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
        return (await send(signed, kind: kind, lifecycle: lifecycle, observation: observation), credential.generation)
    }

    /// One attempt, admitted by the host's traffic policy (which may make it wait, or refuse it),
    /// and registered with the lifecycle so `cancel()` stops it. The awaiting task is resumed at
    /// the transport's next safe point where it offers one (``ResumingTransport``). Instruments
    /// see the attempt once admitted (a refusal by the traffic policy sent nothing).
    func send(
        _ request: TransportRequest,
        kind: HostTraffic.AttemptKind,
        lifecycle: RequestLifecycle,
        observation: Observation?
    ) async -> Result<
        TransportResponse, TransportError
    > {
        var ticket = traffic.ticket(for: request, kind: kind)
        if let refusal = await traffic.admit(&ticket, lifecycle: lifecycle) { return .failure(refusal) }
        guard let observation else { return await start(request, ticket: ticket, lifecycle: lifecycle) }
        var request = request
        let resendCount = observation.attemptWillStart(&request)
        let result = await start(request, ticket: ticket, lifecycle: lifecycle)
        observation.attemptDidEnd(result, request: request, resendCount: resendCount)
        return result
    }

    /// The transport call of an admitted attempt.
    private func start(
        _ request: TransportRequest,
        ticket: TrafficControl.Ticket,
        lifecycle: RequestLifecycle
    ) async -> Result<TransportResponse, TransportError> {
        let (transport, resuming, traffic) = (self.transport, self.resuming, self.traffic)
        // Which attempt this transfer carries: its completion resumes the caller, which may begin
        // the next retry (and attach its wait) before `attach` below runs.
        let attempt = lifecycle.retryCount
        return await withUnsafeContinuation {
            (continuation: UnsafeContinuation<Result<TransportResponse, TransportError>, Never>) in
            let task = transport.start(request) { result in
                traffic.finished(ticket, result)
                self.noteReachability(after: result, of: request, lifecycle: lifecycle)
                continuation.resume(returning: result, through: resuming)
            }
            lifecycle.attach(task, attempt: attempt)
        }
    }
}
