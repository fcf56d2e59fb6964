import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import Foundation
import Testing

/// The delivery rules as a table, without I/O.
@Suite("DeliveryDecision: the offline queue's rules, as a table", .timeLimit(.minutes(2)))
struct DeliveryDecisionTests {
    static let now = Date(timeIntervalSince1970: 1_000_000)
    static let interval = Duration.seconds(30)

    struct Row: Sendable, CustomStringConvertible {
        var outcome: AttemptOutcome
        var attemptsBefore = 0
        var maxAttempts: Int? = nil
        var expiresAt: Date? = nil
        var expected: DeliveryDecision
        var description: String { "\(outcome) after \(attemptsBefore) of \(maxAttempts.map(String.init) ?? "∞")" }
    }

    static let later = now.addingTimeInterval(30)

    static let rows: [Row] = [
        Row(outcome: .status(200), expected: .delivered),
        Row(outcome: .status(201), expected: .delivered),
        Row(outcome: .status(204), expected: .delivered),
        Row(outcome: .status(500), expected: .retry(notBefore: later, countsAttempt: true, reason: "status 500")),
        Row(outcome: .status(404), expected: .retry(notBefore: later, countsAttempt: true, reason: "status 404")),
        Row(outcome: .status(302), expected: .retry(notBefore: later, countsAttempt: true, reason: "status 302")),
        Row(
            outcome: .transport(.connectionReset),
            expected: .retry(notBefore: later, countsAttempt: true, reason: "transport failure: connectionReset")
        ),
        // Nothing left the machine: the attempt does not count.
        Row(
            outcome: .transport(.notConnected),
            attemptsBefore: 4,
            maxAttempts: 5,
            expected: .retry(notBefore: later, countsAttempt: false, reason: "transport failure: notConnected")
        ),
        Row(
            outcome: .transport(.cannotResolveHost),
            expected: .retry(notBefore: later, countsAttempt: false, reason: "transport failure: cannotResolveHost")
        ),
        Row(
            outcome: .status(503),
            attemptsBefore: 4,
            maxAttempts: 5,
            expected: .deadLetter(reason: "ran out of attempts (5); last: status 503", countsAttempt: true)
        ),
        Row(
            outcome: .status(503),
            attemptsBefore: 3,
            maxAttempts: 5,
            expected: .retry(notBefore: later, countsAttempt: true, reason: "status 503")
        ),
        Row(
            outcome: .transport(.timedOut),
            expiresAt: now,
            expected: .deadLetter(reason: "expired; last: transport failure: timedOut", countsAttempt: true)
        ),
        Row(
            outcome: .unreadable("bad"),
            expected: .deadLetter(reason: "the stored request cannot be sent: bad", countsAttempt: false)
        ),
        // Refused by the egress policy: set aside at once, even with attempts and time to spare.
        Row(
            outcome: .egressRefused("egress refused: h → 10.0.0.1 is private"),
            attemptsBefore: 0,
            maxAttempts: nil,
            expected: .deadLetter(reason: "egress refused: h → 10.0.0.1 is private", countsAttempt: true)
        ),
        Row(
            outcome: .authentication("no token"),
            expected: .retry(notBefore: later, countsAttempt: false, reason: "no credential: no token")
        ),
        // A success is a success even past the limits.
        Row(outcome: .status(200), attemptsBefore: 9, maxAttempts: 1, expiresAt: now, expected: .delivered),
        // Held back by the host's traffic policy: nothing was sent; due when the host may be tried.
        Row(
            outcome: .heldBack(until: now.addingTimeInterval(2), reason: "paused"),
            attemptsBefore: 4,
            maxAttempts: 5,
            expected: .retry(notBefore: now.addingTimeInterval(2), countsAttempt: false, reason: "paused")
        ),
        Row(
            outcome: .heldBack(until: nil, reason: "probe out"),
            expected: .retry(notBefore: now.addingTimeInterval(1), countsAttempt: false, reason: "probe out")
        ),
        Row(
            outcome: .heldBack(until: now.addingTimeInterval(2), reason: "paused"),
            expiresAt: now,
            expected: .deadLetter(reason: "expired; last: paused", countsAttempt: false)
        ),
    ]

    @Test("each outcome's decision", arguments: rows)
    func decision(_ row: Row) {
        let decision = DeliveryDecision.decide(
            row.outcome,
            attemptsBefore: row.attemptsBefore,
            maxAttempts: row.maxAttempts,
            expiresAt: row.expiresAt,
            now: Self.now,
            retryInterval: Self.interval
        )
        #expect(decision == row.expected)
    }

    /// Every transport failure kind: the queue (spend an attempt or not) and the manager (keep the
    /// request or fail it) read the same rule as the retry engine and the cache.
    @Test("the queue and the manager class every transport failure by NetworkFailure", arguments: [
        TransportError.Kind.notConnected, .cannotResolveHost, .cannotConnect, .cannotResolveProxy, .timedOut,
        .connectionReset, .outOfResources, .tls, .tooManyRedirects, .redirectRefused, .bodyTooLarge,
        .invalidRequest, .invalidResponse, .fileIO, .cancelled, .shutdown, .other,
    ])
    func sameRuleEverywhere(kind: TransportError.Kind) {
        let rule = NetworkFailure.of(kind)
        let error = TransportError(kind, message: "test")
        // The manager keeps exactly the network-class failures, raw or wrapped in a BrickError.
        for failure in [error as any Error, BrickError.transport(error)] {
            let decision = ManagerDecision.decide(.failure(failure), now: Self.now, submissionInterval: Self.interval) { _ in false }
            if case .keep = decision { #expect(rule.isNetwork) } else { #expect(!rule.isNetwork) }
        }
        let decision = DeliveryDecision.decide(
            .transport(kind), attemptsBefore: 0, maxAttempts: nil, expiresAt: nil, now: Self.now, retryInterval: Self.interval
        )
        guard case .retry(_, let countsAttempt, _) = decision else {
            Issue.record("a transport failure is retried by default: \(decision)")
            return
        }
        #expect(countsAttempt == rule.mayHaveLeftTheMachine)
    }
}
