/// What to do after an attempt fails: the verdict of ``RetryClassification``.
package enum RetryVerdict: Sendable, Hashable {
    /// The network is down: wait until the destination is reachable, spending no attempt
    /// (with ``AutoRetryConfiguration/enableBackgroundRetry``; otherwise treated as ``backOffAndRetry``).
    case parkUntilOnline
    /// A transient failure: wait the backoff delay and try again, spending one attempt.
    case backOffAndRetry
    /// Retrying cannot help, or would not be safe: deliver the failure.
    case fatal
}

/// The retry verdict for every transport failure and status code, with the reason for each: the
/// table the retry engine reads (Alamofire's `RetryPolicy` style: decisions as data).
///
/// | failure | verdict | reason |
/// |---|---|---|
/// | `notConnected` | park until online | no route to the host: nothing was sent, the network must come back first |
/// | `cannotResolveHost` | park until online | DNS failures mostly mean no network; retried once it returns |
/// | `cannotConnect` | back off and retry | refused or unreachable listener; nothing was sent, safe for any method |
/// | `cannotResolveProxy` | back off and retry | the proxy name may resolve later |
/// | `timedOut` | back off and retry | transient congestion or a slow server (idempotent methods only if bytes were sent) |
/// | `connectionReset` | back off and retry | the connection broke (idempotent methods only if bytes were sent) |
/// | `outOfResources` | back off and retry | the process ran out of descriptors or memory; finished requests free them |
/// | `tls` | fatal | certificate, pin or handshake failures do not heal by retrying |
/// | `tooManyRedirects`, `redirectRefused` | fatal | the server's redirect policy will not change |
/// | `bodyTooLarge`, `invalidResponse` | fatal | the same request gets the same answer |
/// | `invalidRequest`, `fileIO` | fatal | the request itself is wrong |
/// | `cancelled`, `shutdown` | fatal | the caller stopped it |
/// | `hostPaused`, `rateLimited`, `circuitOpen` | fatal | held back by the host's traffic policy, which already waited all it may; nothing was sent |
/// | status 408, 429, 500, 502, 503, 504 (``AutoRetryConfiguration/retryableStatusCodes``) | back off and retry | the server says "later" |
/// | any other status | fatal (deliver) | a definite answer |
///
/// A failure after request bytes were sent has an unknown outcome: for a request that is not
/// idempotent (no `Idempotency-Key`), every verdict becomes fatal ("outcome unknown").
package enum RetryClassification {
    /// The verdict for a transport failure.
    ///
    /// - Parameters:
    ///   - error: The failure.
    ///   - isIdempotent: Whether the request may be repeated safely.
    /// - Returns: The verdict and a one-line reason.
    package static func verdict(for error: TransportError, isIdempotent: Bool) -> (verdict: RetryVerdict, reason: String)
    {
        let (verdict, reason) = base(error.kind)
        if verdict != .fatal && error.requestBytesSent && !isIdempotent {
            return (.fatal, "outcome unknown: request bytes were sent and the request is not idempotent")
        }
        return (verdict, reason)
    }

    /// The verdict for a response status.
    ///
    /// - Parameters:
    ///   - status: The status code.
    ///   - configuration: The retry configuration (its retryable statuses).
    ///   - isIdempotent: Whether the request may be repeated safely.
    /// - Returns: The verdict and a one-line reason.
    package static func verdict(
        forStatus status: Int,
        configuration: AutoRetryConfiguration,
        isIdempotent: Bool
    ) -> (verdict: RetryVerdict, reason: String) {
        guard configuration.retryableStatusCodes.contains(status) else {
            return (.fatal, "status \(status) is a definite answer")
        }
        guard isIdempotent else { return (.fatal, "status \(status) on a request that is not idempotent") }
        return (.backOffAndRetry, "status \(status): the server asks to try later")
    }

    /// Whether the retry engine needs to see `result` at all: the cheap check before it, so that
    /// most results skip it. Never `false` for a result the engine could retry or park: a
    /// response whose status the table retries (with retries allowed), any response when a
    /// ``AutoRetryConfiguration/rule`` is set, any failure but cancellation, shutdown and a
    /// traffic-policy refusal (save an open circuit breaker, which parks a request that may park).
    /// (`RetryEngineTests` checks this against the engine, kind by kind and status by status.)
    ///
    /// - Parameters:
    ///   - result: The attempt's result.
    ///   - configuration: The request's retry configuration.
    /// - Returns: Whether to run the engine.
    package static func mayRetry(_ result: Result<TransportResponse, TransportError>, configuration: AutoRetryConfiguration) -> Bool {
        switch result {
        case .success(let response):
            // A status is retried or delivered, never parked: with no retries allowed, delivered.
            guard configuration.maxRetryCount > 0 else { return false }
            return configuration.rule != nil || configuration.retryableStatusCodes.contains(response.status.code)
        case .failure(let error):
            if NetworkFailure.of(error.kind) == .heldBack {
                // Only an open breaker, met while the network is down, may park.
                return error.kind == .circuitOpen && configuration.enableBackgroundRetry
            }
            return error.kind != .cancelled && error.kind != .shutdown
        }
    }

    /// Whether a failure means the server could not be reached (``NetworkFailure/isNetwork``):
    /// what a cache may answer in its place.
    package static func meansUnreachable(_ kind: TransportError.Kind) -> Bool {
        NetworkFailure.of(kind).isNetwork
    }

    /// Whether a failure means the network is down (``NetworkFailure/offline``): the request
    /// parks until the destination is reachable.
    package static func waitsForNetwork(_ kind: TransportError.Kind) -> Bool {
        NetworkFailure.of(kind) == .offline
    }

    private static func base(_ kind: TransportError.Kind) -> (RetryVerdict, String) {
        switch kind {
        // The offline class of ``NetworkFailure`` (`NetworkFailureTests` holds the two together).
        case .notConnected: return (.parkUntilOnline, "no route to the host: wait for the network")
        case .cannotResolveHost: return (.parkUntilOnline, "the name did not resolve: usually no network")
        case .cannotConnect: return (.backOffAndRetry, "the connection was refused; nothing was sent")
        case .cannotResolveProxy: return (.backOffAndRetry, "the proxy name may resolve later")
        case .timedOut: return (.backOffAndRetry, "a timeout: congestion or a slow server")
        case .connectionReset: return (.backOffAndRetry, "the connection broke")
        case .outOfResources: return (.backOffAndRetry, "out of descriptors or memory: others may free them")
        case .tls: return (.fatal, "TLS failures do not heal by retrying")
        case .tooManyRedirects, .redirectRefused: return (.fatal, "the redirect policy will not change")
        case .bodyTooLarge, .invalidResponse: return (.fatal, "the same request gets the same answer")
        case .invalidRequest, .fileIO: return (.fatal, "the request itself is wrong")
        case .cancelled, .shutdown: return (.fatal, "stopped by the caller")
        case .hostPaused, .rateLimited, .circuitOpen:
            return (.fatal, "held back by the host's traffic policy, which waited all it may; nothing was sent")
        default: return (.fatal, "unclassified failure")
        }
    }
}
