import BrickRequest
import Testing

/// Every transport failure kind: its network class, and what the retry engine and the cache make
/// of it. One rule (``NetworkFailure``) answers all of them.
@Suite("NetworkFailure: one rule for 'is this a network failure?', as a table", .timeLimit(.minutes(3)))
struct NetworkFailureTests {
    static let rows: [(TransportError.Kind, NetworkFailure)] = [
        (.notConnected, .offline),
        (.cannotResolveHost, .offline),
        (.cannotConnect, .unreachable),
        (.cannotResolveProxy, .unreachable),
        (.timedOut, .unreachable),
        (.connectionReset, .unreachable),
        (.outOfResources, .localResources),
        (.tls, .notNetwork),
        (.tooManyRedirects, .notNetwork),
        (.redirectRefused, .notNetwork),
        (.bodyTooLarge, .notNetwork),
        (.invalidRequest, .notNetwork),
        (.invalidResponse, .notNetwork),
        (.fileIO, .notNetwork),
        (.cancelled, .notNetwork),
        (.shutdown, .notNetwork),
        (.other, .notNetwork),
        (.hostPaused, .heldBack),
        (.rateLimited, .heldBack),
        (.circuitOpen, .heldBack),
    ]

    @Test("each kind's class, and the retry engine and the cache agree with it", arguments: rows)
    func row(kind: TransportError.Kind, expected: NetworkFailure) {
        let error = TransportError(kind, message: "test")
        #expect(NetworkFailure.of(kind) == expected)
        #expect(NetworkFailure.of(error) == expected)
        // Wrapped in a BrickError, the class is the wrapped failure's.
        #expect(NetworkFailure.of(BrickError.transport(error)) == expected)
        // The cache falls back exactly for network-class failures.
        #expect(RetryClassification.meansUnreachable(kind) == expected.isNetwork)
        // The retry engine parks exactly the offline class, and never gives up at once on a
        // network-class failure.
        let verdict = RetryClassification.verdict(for: error, isIdempotent: true).verdict
        #expect((verdict == .parkUntilOnline) == (expected == .offline))
        if expected == .offline || expected == .unreachable { #expect(verdict != .fatal) }
        // Held back by the host's traffic policy: never retried by the engine (the policy already
        // waited what it may), but kept by queues and answered by the cache.
        if expected == .heldBack { #expect(verdict == .fatal && !expected.mayHaveLeftTheMachine) }
    }

    @Test("a BrickError made without a transport failure is classed by its code")
    func brickErrorCodes() {
        #expect(NetworkFailure.of(BrickError(.notConnected, message: "x")) == .offline)
        #expect(NetworkFailure.of(BrickError(.cannotConnect, message: "x")) == .unreachable)
        #expect(NetworkFailure.of(BrickError(.timedOut, message: "x")) == .unreachable)
        #expect(NetworkFailure.of(BrickError(.connectionLost, message: "x")) == .unreachable)
        #expect(NetworkFailure.of(BrickError(.tls, message: "x")) == .notNetwork)
        #expect(NetworkFailure.of(BrickError(.hostPaused, message: "x")) == .heldBack)
        #expect(NetworkFailure.of(BrickError(.circuitOpen, message: "x")) == .heldBack)
        #expect(NetworkFailure.of(BrickError(.unacceptableStatusCode, message: "x")) == .notNetwork)
        struct Other: Error {}
        #expect(NetworkFailure.of(Other()) == .notNetwork)
    }
}
