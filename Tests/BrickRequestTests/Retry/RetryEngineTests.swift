import BrickRequest
import Foundation
import Testing

@Suite("Retry classification, backoff and the engine (no I/O)", .timeLimit(.minutes(2)))
struct RetryEngineTests {
    static let kinds: [TransportError.Kind] = [
        .notConnected, .cannotResolveHost, .cannotResolveProxy, .cannotConnect, .connectionReset, .timedOut, .tls,
        .tooManyRedirects, .redirectRefused, .bodyTooLarge, .invalidRequest, .invalidResponse, .fileIO, .cancelled,
        .shutdown, .other, .hostPaused, .rateLimited, .circuitOpen,
    ]

    static let expected: [TransportError.Kind: RetryVerdict] = [
        .notConnected: .parkUntilOnline, .cannotResolveHost: .parkUntilOnline, .cannotResolveProxy: .backOffAndRetry,
        .cannotConnect: .backOffAndRetry, .connectionReset: .backOffAndRetry, .timedOut: .backOffAndRetry, .tls: .fatal,
        .tooManyRedirects: .fatal, .redirectRefused: .fatal, .bodyTooLarge: .fatal, .invalidRequest: .fatal,
        .invalidResponse: .fatal, .fileIO: .fatal, .cancelled: .fatal, .shutdown: .fatal, .other: .fatal,
        .hostPaused: .fatal, .rateLimited: .fatal, .circuitOpen: .fatal,
    ]

    @Test("every error kind × idempotency × bytes sent has the documented verdict", arguments: kinds)
    func classification(kind: TransportError.Kind) throws {
        let base = try #require(Self.expected[kind])
        for idempotent in [true, false] {
            for sent in [true, false] {
                let error = TransportError(kind, message: "x", requestBytesSent: sent)
                let (verdict, reason) = RetryClassification.verdict(for: error, isIdempotent: idempotent)
                let wanted: RetryVerdict = (sent && !idempotent && base != .fatal) ? .fatal : base
                #expect(verdict == wanted, "\(kind) idempotent=\(idempotent) sent=\(sent): \(reason)")
                #expect(!reason.isEmpty)
            }
        }
    }

    @Test("status codes: the retryable set retries idempotent requests only")
    func statuses() {
        let configuration = AutoRetryConfiguration()
        for status in [200, 201, 204, 301, 400, 401, 403, 404, 408, 409, 422, 429, 500, 501, 502, 503, 504, 505] {
            let retryable = [408, 429, 500, 502, 503, 504].contains(status)
            #expect(
                RetryClassification.verdict(forStatus: status, configuration: configuration, isIdempotent: true).verdict
                    == (retryable ? .backOffAndRetry : .fatal)
            )
            #expect(
                RetryClassification.verdict(forStatus: status, configuration: configuration, isIdempotent: false)
                    .verdict
                    == .fatal
            )
        }
    }

    @Test("exponential backoff: the documented caps, full jitter within them")
    func exponential() {
        let configuration = AutoRetryConfiguration(
            breakTime: .seconds(1),
            backoff: .exponential(multiplier: 2, max: .seconds(60))
        )
        let top = RetryEngine(configuration: configuration, isIdempotent: true, random: { $0 })
        #expect(top.backoffDelay(afterFailure: 1) == .seconds(1))
        #expect(top.backoffDelay(afterFailure: 2) == .seconds(2))
        #expect(top.backoffDelay(afterFailure: 5) == .seconds(16))
        #expect(top.backoffDelay(afterFailure: 10) == .seconds(60))
        #expect(top.backoffDelay(afterFailure: 10_000) == .seconds(60))
        let bottom = RetryEngine(configuration: configuration, isIdempotent: true, random: { _ in 0 })
        #expect(bottom.backoffDelay(afterFailure: 7) == .zero)
        let real = RetryEngine(configuration: configuration, isIdempotent: true)
        for failure in 1...12 {
            let cap = min(60.0, pow(2, Double(failure - 1)))
            let delay = real.backoffDelay(afterFailure: failure)
            #expect(delay >= .zero && delay <= .milliseconds(Int64(cap * 1000)))
        }
        let constant = RetryEngine(configuration: AutoRetryConfiguration(breakTime: .seconds(5)), isIdempotent: true)
        #expect(constant.backoffDelay(afterFailure: 4) == .seconds(5))
    }

    @Test("attempts = maxRetryCount + 1 exactly; 0 means no retry", arguments: [0, 1, 3, 5, 10])
    func attempts(maxRetryCount: Int) {
        var engine = RetryEngine(
            configuration: AutoRetryConfiguration(maxRetryCount: maxRetryCount),
            isIdempotent: true
        )
        var attempts = 1
        while case .retryAfter = engine.attemptFinished(
            .response(status: 503, retryAfter: nil),
            elapsed: .zero,
            isReachable: true
        ) {
            attempts += 1
        }
        #expect(attempts == maxRetryCount + 1)
        #expect(engine.retryCount == maxRetryCount)
    }

    @Test("Retry-After is never undercut; one longer than the call waits ends the call with its response")
    func retryAfter() {
        var engine = RetryEngine(configuration: AutoRetryConfiguration(breakTime: .seconds(5)), isIdempotent: true)
        #expect(
            engine.attemptFinished(.response(status: 429, retryAfter: .seconds(30)), elapsed: .zero, isReachable: true)
                == .retryAfter(.seconds(30))
        )
        #expect(engine.declinedRetryAfter == nil)
        #expect(
            engine.attemptFinished(.response(status: 503, retryAfter: .seconds(1)), elapsed: .zero, isReachable: true)
                == .retryAfter(.seconds(5))
        )
        #expect(
            engine.attemptFinished(
                .response(status: 503, retryAfter: .seconds(86_400)),
                elapsed: .zero,
                isReachable: true
            ) == .deliver
        )
        #expect(engine.declinedRetryAfter == .seconds(86_400))
        #expect(engine.retryCount == 2)
        var ignoring = RetryEngine(
            configuration: AutoRetryConfiguration(breakTime: .seconds(5), honorsRetryAfter: false),
            isIdempotent: true
        )
        #expect(
            ignoring.attemptFinished(
                .response(status: 429, retryAfter: .seconds(30)),
                elapsed: .zero,
                isReachable: true
            ) == .retryAfter(.seconds(5))
        )
    }

    @Test("Retry-After values: seconds, HTTP dates, garbage")
    func retryAfterParsing() {
        let now = Date(timeIntervalSince1970: 1_000_000_000)
        #expect(RetryAfterParsing.delay("120", now: now) == .seconds(120))
        #expect(RetryAfterParsing.delay("Sun, 09 Sep 2001 01:47:00 GMT", now: now) == .seconds(20))
        #expect(RetryAfterParsing.delay("Sunday, 09-Sep-01 01:47:00 GMT", now: now) == .seconds(20))
        #expect(RetryAfterParsing.delay("Sun Sep  9 01:47:00 2001", now: now) == .seconds(20))
        #expect(RetryAfterParsing.delay("Sat, 01 Jan 2000 00:00:00 GMT", now: now) == .zero)
        #expect(RetryAfterParsing.delay("soon", now: now) == nil)
        #expect(RetryAfterParsing.delay("-5", now: now) == nil)
        #expect(RetryAfterParsing.delay("+5", now: now) == nil)
        // Huge values saturate, whether or not they fit an Int64.
        #expect(RetryAfterParsing.delay("1000000000000", now: now) == .seconds(Int64(1) << 31))
        #expect(RetryAfterParsing.delay("9223372036854775808", now: now) == .seconds(Int64(1) << 31))
        #expect(RetryAfterParsing.delay("99999999999999999999999", now: now) == .seconds(Int64(1) << 31))
    }

    @Test("HTTP dates: the three forms, leap years, two-digit years, and what is refused")
    func httpDates() {
        let now = Date(timeIntervalSince1970: 1_000_000_000)  // Sun, 09 Sep 2001 01:46:40 GMT
        let seconds = { (text: String) in RetryAfterParsing.delay(text, now: now) }
        // 29 Feb 2004 exists; the same day in 2100 does not (not a leap year).
        #expect(seconds("Sun, 29 Feb 2004 00:00:00 GMT") == .seconds(1_078_012_800 - 1_000_000_000))
        #expect(seconds("Mon, 29 Feb 2100 00:00:00 GMT") == nil)
        #expect(seconds("Wed, 01 Mar 2100 00:00:00 GMT") == .seconds(4_107_542_400 - 1_000_000_000))
        #expect(seconds("  Sun, 09 Sep 2001 01:47:00 GMT\t") == .seconds(20))
        #expect(seconds("sun, 09 sep 2001 01:47:00 gmt") == .seconds(20))
        // RFC 850: a two-digit year more than 50 years ahead is from the last century.
        #expect(seconds("Thursday, 01-Jan-70 00:00:01 GMT") == .zero)  // 1970, not 2070
        #expect(seconds("Monday, 01-Jan-40 00:00:00 GMT") == .seconds(2_208_988_800 - 1_000_000_000))
        #expect(seconds("Sun Sep 09 01:47:00 2001") == .seconds(20))
        for refused in [
            "Sun, 9 Sep 2001 01:47:00 GMT",  // one-digit day in IMF-fixdate
            "Sun, 09 Sep 2001 01:47:00 CET",  // not GMT
            "Sun, 31 Sep 2001 01:47:00 GMT",  // September has 30 days
            "Sun, 09 Sep 2001 24:00:00 GMT",
            "Sun, 09 Sep 2001 01:60:00 GMT",
            "Sun, 09 Foo 2001 01:47:00 GMT",
            "Xyz, 09 Sep 2001 01:47:00 GMT",
            "Sun, 09 Sep 2001 1:47:00 GMT",
            "Sun Sep  9 01:47:00 01",
            "Sun, +9 Sep 2001 01:47:00 GMT",  // a sign is not a digit
            "Sun, 09 Sep +001 01:47:00 GMT",
            "Sun, 09 Sep 2001 01:47:+0 GMT",
            "",
        ] {
            #expect(seconds(refused) == nil, "\(refused)")
        }
    }

    @Test("offline failures park without spending attempts; failWhenNotReachable delivers")
    func parking() {
        let offline = TransportError(.notConnected, message: "down")
        var engine = RetryEngine(configuration: AutoRetryConfiguration(maxRetryCount: 1), isIdempotent: true)
        for _ in 0..<20 {
            #expect(engine.attemptFinished(.failure(offline), elapsed: .zero, isReachable: false) == .park)
        }
        #expect(engine.retryCount == 0)
        // Reported reachable (or unknown) yet failing offline: a normal, attempt-spending retry.
        #expect(
            engine.attemptFinished(.failure(offline), elapsed: .zero, isReachable: true) == .retryAfter(.seconds(5))
        )
        #expect(engine.attemptFinished(.failure(offline), elapsed: .zero, isReachable: nil) == .deliver)
        #expect(engine.retryCount == 1)
        var foreground = RetryEngine(
            configuration: AutoRetryConfiguration(maxRetryCount: 1, enableBackgroundRetry: false),
            isIdempotent: true
        )
        #expect(
            foreground.attemptFinished(.failure(offline), elapsed: .zero, isReachable: false)
                == .retryAfter(.seconds(5))
        )
        #expect(foreground.attemptFinished(.failure(offline), elapsed: .zero, isReachable: false) == .deliver)
        var strict = RetryEngine(configuration: AutoRetryConfiguration(failWhenNotReachable: true), isIdempotent: true)
        #expect(strict.attemptFinished(.failure(offline), elapsed: .zero, isReachable: false) == .deliver)
    }

    @Test("POST: retried only when nothing was sent, unless it carries an idempotency key")
    func nonIdempotent() {
        let reset = TransportError(.connectionReset, message: "reset", requestBytesSent: true)
        let refused = TransportError(.cannotConnect, message: "refused", requestBytesSent: false)
        var post = RetryEngine(configuration: AutoRetryConfiguration(), isIdempotent: false)
        #expect(post.attemptFinished(.failure(reset), elapsed: .zero, isReachable: true) == .deliver)
        #expect(post.lastReason.contains("outcome unknown"))
        #expect(post.attemptFinished(.failure(refused), elapsed: .zero, isReachable: true) == .retryAfter(.seconds(5)))
        var keyed = RetryEngine(configuration: AutoRetryConfiguration(), isIdempotent: true)
        #expect(keyed.attemptFinished(.failure(reset), elapsed: .zero, isReachable: true) == .retryAfter(.seconds(5)))
    }

    @Test("maxTotalDuration stops retries that would run past it")
    func totalDuration() {
        var engine = RetryEngine(
            configuration: AutoRetryConfiguration(breakTime: .seconds(5), maxTotalDuration: .seconds(12)),
            isIdempotent: true
        )
        #expect(
            engine.attemptFinished(.response(status: 503, retryAfter: nil), elapsed: .seconds(1), isReachable: true)
                == .retryAfter(.seconds(5))
        )
        #expect(
            engine.attemptFinished(.response(status: 503, retryAfter: nil), elapsed: .seconds(6), isReachable: true)
                == .retryAfter(.seconds(5))
        )
        #expect(
            engine.attemptFinished(.response(status: 503, retryAfter: nil), elapsed: .seconds(11), isReachable: true)
                == .deliver
        )
    }

    /// One row of the time-limit table: what the engine does after a retryable response.
    struct LimitRow: Sendable, CustomTestStringConvertible {
        var timeout: Duration?
        var maxTotal: Duration?
        var longest: Duration = RetryEngine.defaultLongestRetryAfter
        var retryAfter: Duration?
        var elapsed: Duration
        var action: RetryEngine.Action
        var declined: Duration?
        var testDescription: String {
            "timeout \(timeout.map { "\($0)" } ?? "-"), total \(maxTotal.map { "\($0)" } ?? "-"), longest \(longest), Retry-After \(retryAfter.map { "\($0)" } ?? "-") at \(elapsed)"
        }
    }

    static let limitRows: [LimitRow] = [
        // The request's own timeout bounds every wait, from the first attempt's start.
        LimitRow(timeout: .seconds(1), retryAfter: .seconds(10), elapsed: .milliseconds(5), action: .deliver, declined: .seconds(10)),
        LimitRow(timeout: .seconds(20), retryAfter: .seconds(10), elapsed: .seconds(5), action: .retryAfter(.seconds(10))),
        LimitRow(timeout: .seconds(20), retryAfter: .seconds(10), elapsed: .seconds(11), action: .deliver, declined: .seconds(10)),
        // Backoff alone (2 s constant) against the timeout.
        LimitRow(timeout: .seconds(3), elapsed: .milliseconds(500), action: .retryAfter(.seconds(2))),
        LimitRow(timeout: .seconds(3), elapsed: .milliseconds(1500), action: .deliver),
        // The shorter of timeout and maxTotalDuration wins.
        LimitRow(timeout: .seconds(60), maxTotal: .seconds(4), elapsed: .seconds(3), action: .deliver),
        LimitRow(timeout: .seconds(4), maxTotal: .seconds(60), elapsed: .seconds(3), action: .deliver),
        // A Retry-After beyond the host's wait ends the call at once, whatever the limits.
        LimitRow(retryAfter: .seconds(31), elapsed: .zero, action: .deliver, declined: .seconds(31)),
        LimitRow(retryAfter: .seconds(30), elapsed: .zero, action: .retryAfter(.seconds(30))),
        LimitRow(retryAfter: .seconds(Int64(1) << 31), elapsed: .zero, action: .deliver, declined: .seconds(Int64(1) << 31)),
        LimitRow(longest: .seconds(120), retryAfter: .seconds(100), elapsed: .zero, action: .retryAfter(.seconds(100))),
        LimitRow(longest: .zero, retryAfter: .seconds(1), elapsed: .zero, action: .deliver, declined: .seconds(1)),
        LimitRow(longest: .zero, retryAfter: .zero, elapsed: .zero, action: .retryAfter(.seconds(2))),
    ]

    @Test("an in-memory call never waits past its own timeout or maxTotalDuration, nor longer than its host's wait for a Retry-After", arguments: limitRows)
    func timeLimits(row: LimitRow) {
        var engine = RetryEngine(
            configuration: AutoRetryConfiguration(breakTime: .seconds(2), backoff: .constant, maxTotalDuration: row.maxTotal),
            isIdempotent: true,
            timeout: row.timeout,
            longestRetryAfter: row.longest
        )
        let action = engine.attemptFinished(.response(status: 429, retryAfter: row.retryAfter), elapsed: row.elapsed, isReachable: true)
        #expect(action == row.action)
        #expect(engine.declinedRetryAfter == row.declined)
    }

    @Test("parking ends at the call's time limit")
    func parkingBounded() {
        var engine = RetryEngine(
            configuration: AutoRetryConfiguration(enableBackgroundRetry: true),
            isIdempotent: true,
            timeout: .seconds(5)
        )
        let offline = TransportError(.notConnected, message: "down")
        #expect(engine.attemptFinished(.failure(offline), elapsed: .seconds(1), isReachable: false) == .park)
        #expect(engine.attemptFinished(.failure(offline), elapsed: .seconds(5), isReachable: false) == .deliver)
    }
}
