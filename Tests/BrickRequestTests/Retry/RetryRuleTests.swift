import BrickRequest
import BrickTesting
import Foundation
import HTTPTypes
import Synchronization
import Testing

@Suite("Custom retry rules, and the engine's precheck agreeing with the engine (no I/O)", .timeLimit(.minutes(2)))
struct RetryRuleTests {
    static let kinds: [TransportError.Kind] = [
        .notConnected, .cannotResolveHost, .cannotResolveProxy, .cannotConnect, .connectionReset, .timedOut, .tls,
        .tooManyRedirects, .redirectRefused, .bodyTooLarge, .invalidRequest, .invalidResponse, .fileIO,
        .outOfResources, .cancelled, .shutdown, .other, .hostPaused, .rateLimited, .circuitOpen,
    ]
    static let statuses = [200, 201, 204, 301, 400, 401, 404, 408, 409, 429, 500, 501, 502, 503, 504]

    struct Row: Sendable, CustomStringConvertible {
        var decision: RetryDecision
        var status: Int?
        var retriesMade: Int
        var expected: RetryEngine.Action
        var line: Int
        var description: String { "line \(line): \(decision) status \(status.map(String.init) ?? "failure")" }
    }

    /// maxRetryCount 2; `retriesMade` retries spent before the attempt.
    static let rows: [Row] = [
        Row(decision: .retry, status: 409, retriesMade: 0, expected: .retry, line: #line),
        Row(decision: .retryAfter(.seconds(3)), status: 409, retriesMade: 0, expected: .retryAfter(.seconds(3)), line: #line),
        Row(decision: .retry, status: 409, retriesMade: 2, expected: .deliver, line: #line),
        Row(decision: .fail, status: 503, retriesMade: 0, expected: .deliver, line: #line),
        Row(decision: .fail, status: nil, retriesMade: 0, expected: .deliver, line: #line),
        Row(decision: .useTable, status: 503, retriesMade: 0, expected: .retryAfter(.seconds(5)), line: #line),
        Row(decision: .useTable, status: 409, retriesMade: 0, expected: .deliver, line: #line),
        Row(decision: .useTable, status: nil, retriesMade: 0, expected: .retryAfter(.seconds(5)), line: #line),
        Row(decision: .retry, status: nil, retriesMade: 1, expected: .retry, line: #line),
    ]

    @Test("the rule's decision × retries left × response or failure", arguments: rows)
    func rule(row: Row) {
        // The rule says retry for the retries the row has made already, then the row's decision.
        let (made, decision) = (row.retriesMade, row.decision)
        let configuration = AutoRetryConfiguration.custom(maxRetryCount: 2) { $0.attempt <= made ? .retry : decision }
        var engine = RetryEngine(configuration: configuration, isIdempotent: true)
        let failure = RetryEngine.Outcome.failure(TransportError(.cannotConnect, message: "x"))
        for _ in 0..<made { #expect(engine.attemptFinished(failure, elapsed: .zero, isReachable: true) == .retry) }
        #expect(engine.retryCount == made)
        let outcome: RetryEngine.Outcome = row.status.map { .response(status: $0, retryAfter: nil) } ?? failure
        #expect(engine.attemptFinished(outcome, elapsed: .zero, isReachable: true) == row.expected, "\(row)")
    }

    @Test("the rule sees the attempt number, the response and its fields, or the error")
    func context() {
        let seen = Lock<[RetryContext]>([])
        let configuration = AutoRetryConfiguration.custom(maxRetryCount: 3) { context in
            seen.withLock { $0.append(context) }
            return .retry
        }
        var engine = RetryEngine(configuration: configuration, isIdempotent: false)
        var fields = HTTPFields()
        fields[HTTPField.Name("X-Token-Expired")!] = "1"
        let response = TransportResponse(status: .unauthorized, headerFields: fields)
        _ = engine.attemptFinished(.response(status: 401, retryAfter: nil), elapsed: .seconds(1), isReachable: true, response: response)
        _ = engine.attemptFinished(.failure(TransportError(.tls, message: "pin")), elapsed: .seconds(2), isReachable: true)
        let contexts = seen.withLock { $0 }
        #expect(contexts.map(\.attempt) == [1, 2])
        #expect(contexts[0].status == 401)
        #expect(contexts[0].response?.headerFields[HTTPField.Name("X-Token-Expired")!] == "1")
        #expect(contexts[1].error?.kind == .tls)
        #expect(contexts[1].response == nil)
        #expect(contexts[1].elapsed == .seconds(2))
        #expect(!contexts[0].isIdempotent)
    }

    @Test("a retry the rule asks for respects maxTotalDuration")
    func totalDuration() {
        var configuration = AutoRetryConfiguration.custom(maxRetryCount: 5) { _ in .retryAfter(.seconds(10)) }
        configuration.maxTotalDuration = .seconds(15)
        var engine = RetryEngine(configuration: configuration, isIdempotent: true)
        #expect(engine.attemptFinished(.response(status: 409, retryAfter: nil), elapsed: .seconds(1), isReachable: true) == .retryAfter(.seconds(10)))
        #expect(engine.attemptFinished(.response(status: 409, retryAfter: nil), elapsed: .seconds(11), isReachable: true) == .deliver)
    }

    @Test("the session's precheck never skips a result the engine would retry or park", arguments: [false, true])
    func precheckAgrees(withRule: Bool) {
        var configuration = AutoRetryConfiguration(maxRetryCount: 3)
        if withRule { configuration.rule = ClosureRetryRule { $0.status == 409 ? .retry : .useTable } }
        for kind in Self.kinds {
            for sent in [false, true] {
                let error = TransportError(kind, message: "x", requestBytesSent: sent)
                for reachable in [true, false] {
                    var engine = RetryEngine(configuration: configuration, isIdempotent: true)
                    let action = engine.attemptFinished(.failure(error), elapsed: .zero, isReachable: reachable)
                    if action != .deliver {
                        #expect(RetryClassification.mayRetry(.failure(error), configuration: configuration), "\(kind)")
                    }
                }
            }
        }
        for status in Self.statuses {
            let response = TransportResponse(status: .init(code: status))
            var engine = RetryEngine(configuration: configuration, isIdempotent: true)
            let action = engine.attemptFinished(.response(status: status, retryAfter: nil), elapsed: .zero, isReachable: true, response: response)
            if action != .deliver {
                #expect(RetryClassification.mayRetry(.success(response), configuration: configuration), "status \(status)")
            }
        }
    }
}

/// A GET whose retries come from a rule: retry a 409 that says its token expired.
final class RuleGet: Component, GETRequestType, DataResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/orders" }
    var autoRetryConfiguration: AutoRetryConfiguration {
        .custom(maxRetryCount: 2, breakTime: .zero) { attempt in
            attempt.response?.headerFields[HTTPField.Name("X-Token-Expired")!] == "1" ? .retry : .useTable
        }
    }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

@Suite("A custom retry rule through the session", .timeLimit(.minutes(2)))
struct RetryRuleSessionTests {
    @Test("the session hands the rule the response; a 409 with the header is retried, one without is not")
    func throughSession() async {
        let stub = StubTransport()
        var expired = HTTPFields()
        expired[HTTPField.Name("X-Token-Expired")!] = "1"
        stub.stub(.get, "/orders", StubResponse(status: .conflict, headers: expired), StubResponse(status: .conflict), .json("{}"))
        let response = await RuleGet(session: .testing(stub)).response()
        #expect(response.status?.code == 409)
        #expect(response.retryCount == 1)
        #expect(stub.requests.count == 2)
    }
}
