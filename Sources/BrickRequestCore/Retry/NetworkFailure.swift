/// What a failure says about the network: the one rule that the retry engine (park or back off),
/// the cache (answer from a stored response when the server cannot be reached), the offline queue
/// (spend an attempt or not) and the offline request manager (keep the request or fail it) all
/// read, so that they never disagree.
///
/// | failure | class |
/// |---|---|
/// | `notConnected`, `cannotResolveHost` | ``offline``: no route or no name; nothing left this machine |
/// | `cannotConnect`, `cannotResolveProxy`, `timedOut`, `connectionReset` | ``unreachable``: the server (or the proxy) could not be reached, or the connection broke |
/// | `outOfResources` | ``localResources``: this process ran out of descriptors or memory; nothing left it |
/// | `hostPaused`, `rateLimited`, `circuitOpen` | ``heldBack``: the host's traffic policy kept it back; nothing left this machine |
/// | anything else (TLS, redirects, invalid request or response, cancelled, …) | ``notNetwork`` |
///
/// A ``BrickError`` is classed by the ``TransportError`` it wraps; one made without one by its code
/// (`notConnected` → offline; `cannotConnect`, `timedOut`, `connectionLost` → unreachable).
package enum NetworkFailure: Sendable, Hashable {
    /// No route to the host or its name did not resolve: the network must come back first.
    case offline
    /// The server or proxy could not be reached, or the connection broke on the way.
    case unreachable
    /// The process ran out of descriptors or memory.
    case localResources
    /// The host's traffic policy held the request back (a pause the server asked for, the rate,
    /// an open circuit breaker): try again later; nothing was sent.
    case heldBack
    /// Not a network failure.
    case notNetwork

    /// The class of a transport failure.
    package static func of(_ kind: TransportError.Kind) -> NetworkFailure {
        switch kind {
        case .notConnected, .cannotResolveHost: return .offline
        case .cannotConnect, .cannotResolveProxy, .timedOut, .connectionReset: return .unreachable
        case .outOfResources: return .localResources
        case .hostPaused, .rateLimited, .circuitOpen: return .heldBack
        default: return .notNetwork
        }
    }

    /// The class of any error: a ``TransportError``, a ``BrickError`` (by the transport failure it
    /// wraps, else by its code), anything else is ``notNetwork``.
    package static func of(_ error: any Error) -> NetworkFailure {
        if let error = error as? TransportError { return of(error.kind) }
        guard let error = error as? BrickError else { return .notNetwork }
        if let transport = error.transportError { return of(transport.kind) }
        switch error.code {
        case .notConnected: return .offline
        case .cannotConnect, .timedOut, .connectionLost: return .unreachable
        case .hostPaused, .rateLimited, .circuitOpen: return .heldBack
        default: return .notNetwork
        }
    }

    /// The network, or the host's traffic policy, stood between the client and the server: keep
    /// the request, or answer from the cache.
    package var isNetwork: Bool { self == .offline || self == .unreachable || self == .heldBack }

    /// Whether a request that failed this way may have reached the network at all (an attempt that
    /// did not is not counted against a queued request's limit).
    package var mayHaveLeftTheMachine: Bool { self == .unreachable || self == .notNetwork }
}
