import BrickOffline
import BrickRequest
import Foundation
import Testing

/// The manager's decision after an attempt, as a table, without I/O.
@Suite("ManagerDecision: the offline request manager's rules, as a table", .timeLimit(.minutes(1)))
struct ManagerDecisionTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let interval: Duration = .seconds(10)

    struct Other: Error, CustomStringConvertible { var description: String { "other" } }

    struct Row: Sendable, CustomStringConvertible {
        var name: String
        var error: (any Error & Sendable)?
        var asksAgain: Bool
        var expected: ManagerDecision
        var description: String { name }
    }

    static let rows: [Row] = [
        Row(name: "success", error: nil, asksAgain: true, expected: .finished),
        Row(
            name: "time limit: never again, even if asked",
            error: OfflineRequestTimeout(), asksAgain: true,
            expected: .fail(reason: "Offline Request Timed Out")
        ),
        Row(
            name: "network-class: kept, not asked",
            error: TransportError(.cannotResolveProxy, message: "proxy"), asksAgain: false,
            expected: .keep(notBefore: now.addingTimeInterval(10), reason: "\(TransportError(.cannotResolveProxy, message: "proxy"))")
        ),
        Row(
            name: "network-class BrickError: kept",
            error: BrickError(.notConnected, message: "down"), asksAgain: false,
            expected: .keep(notBefore: now.addingTimeInterval(10), reason: "\(BrickError(.notConnected, message: "down"))")
        ),
        Row(name: "other, asked again", error: Other(), asksAgain: true, expected: .again(reason: "other")),
        Row(name: "other, not asked", error: Other(), asksAgain: false, expected: .fail(reason: "other")),
        Row(
            name: "TLS is not network-class",
            error: TransportError(.tls, message: "bad certificate"), asksAgain: false,
            expected: .fail(reason: "\(TransportError(.tls, message: "bad certificate"))")
        ),
    ]

    @Test("each outcome's decision", arguments: rows)
    func decision(_ row: Row) {
        let outcome: Result<Void, any Error> = row.error.map { .failure($0) } ?? .success(())
        let decision = ManagerDecision.decide(outcome, now: Self.now, submissionInterval: Self.interval) { _ in row.asksAgain }
        #expect(decision == row.expected)
    }
}
