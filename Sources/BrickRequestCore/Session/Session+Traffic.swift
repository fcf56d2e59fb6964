import FoundationEssentials

/// Traffic control as callers see it: the state of each host, and the one send that offline
/// queues use (admitted like every other attempt of the session).
extension Session {
    /// How the session treats one host now: its rate, a pause the server asked for, its circuit
    /// breaker, its retry budget, its concurrency. `nil` when the session has not sent to the host
    /// (or forgot it after five idle minutes with nothing learned), or its policy is
    /// ``HostPolicy/unlimited``.
    ///
    /// ```swift
    /// if let state = Session.api.trafficState(forHost: "api.partner.com"), let until = state.pausedUntil {
    ///     print("partner API paused until \(until)")
    /// }
    /// ```
    ///
    /// - Parameter host: `host` or `host:port`, as the request URLs give it (`"127.0.0.1:8080"`).
    /// - Returns: The state.
    public func trafficState(forHost host: String) -> HostTrafficState? {
        if let state = traffic.state(forHost: host) { return state }
        // A bare host name finds the one port the session has used with it.
        let matching = traffic.states.filter { $0.host.hasPrefix(host.lowercased() + ":") }
        return matching.count == 1 ? matching[0] : nil
    }

    /// The state of every host the session remembers, sorted by host.
    public var trafficStates: [HostTrafficState] { traffic.states }

    /// How long from now, on the session's clock, a request held back until `date` (a
    /// ``TransportError/notBefore``) must wait: what an offline loop adds to its own clock's
    /// now, so that the two agree even when the session runs on a `ManualClock`.
    ///
    /// - Parameter date: The date from the refusal.
    /// - Returns: The wait, zero when the date has passed.
    package func heldBackDelay(until date: Date) -> Duration {
        .seconds(max(0, date.timeIntervalSince(clock.date(at: clock.elapsed()))))
    }

    /// The date, on a loop whose clock reads `now`, at which a request held back by `error` may
    /// be tried (`nil` when the error is not a refusal with a date).
    ///
    /// - Parameters:
    ///   - error: The failure (a ``TransportError`` or a ``BrickError`` around one).
    ///   - now: The loop's now.
    package func heldBackDate(for error: any Error, now: Date) -> Date? {
        let notBefore = (error as? TransportError)?.notBefore ?? (error as? BrickError)?.notBefore
        return notBefore.map { now.addingTimeInterval(heldBackDelay(until: $0).seconds) }
    }

    /// Sends one request through the host's traffic policy and the transport, with nothing else of
    /// the session (no retries, no validation): what an offline queue's attempt is. A pause the
    /// server asked for is not waited out but refused (``TransportError/Kind/hostPaused`` with
    /// its date), so that the queue reschedules the entry without spending an attempt.
    ///
    /// The session's instruments see the attempt as one of a request made `attemptsBefore` times
    /// already (its resend count).
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - attemptsBefore: Attempts made earlier for the same entry.
    /// - Returns: The response.
    /// - Throws: The transport's error, or the traffic policy's refusal.
    package func sendThroughTrafficControl(
        _ request: TransportRequest,
        attemptsBefore: Int = 0
    ) async throws(TransportError) -> TransportResponse {
        var ticket = traffic.ticket(for: request, kind: .first, waitsOutPauses: false)
        if let refusal = await traffic.admit(&ticket, lifecycle: nil) { throw refusal }
        var request = request
        if request.options.egressPolicy == nil, !configuration.egressPolicy.isUnrestricted {
            request.options.egressPolicy = configuration.egressPolicy
        }
        let observation = observation(of: request, operation: nil, attemptsBefore: attemptsBefore)
        let resendCount = observation?.attemptWillStart(&request) ?? 0
        let result: Result<TransportResponse, TransportError>
        do {
            result = .success(try await transport.send(request))
        } catch {
            result = .failure(error)
        }
        traffic.finished(ticket, result)
        observation?.attemptDidEnd(result, request: request, resendCount: resendCount)
        return try result.get()
    }
}
