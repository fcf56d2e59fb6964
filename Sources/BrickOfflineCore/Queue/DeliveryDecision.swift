import BrickRequest
import Foundation

/// What happened to one attempt at delivering a stored request.
package enum AttemptOutcome: Sendable, Hashable {
    /// A response arrived with this status.
    case status(Int)
    /// The transport failed.
    case transport(TransportError.Kind)
    /// The stored request could not be read back or sent as stored (a later release's format,
    /// an invalid URL): attempting it again cannot help.
    case unreadable(String)
    /// The authenticator could not produce or refresh a credential.
    case authentication(String)
    /// The session's traffic policy for the host held the request back (a pause the server asked
    /// for, the host's rate, an open circuit breaker): nothing was sent; `until` is when the host
    /// may be tried again, when known.
    case heldBack(until: Date?, reason: String)
    /// The session's egress policy refused the address (``TransportError/Kind/egressRefused``):
    /// nothing was sent, and no later attempt would be allowed either.
    case egressRefused(String)
}

/// What a queue does after an attempt: the pure decision at the heart of offline delivery,
/// tested by a table without I/O (as BrickRequest's retry engine is).
package enum DeliveryDecision: Sendable, Hashable {
    /// Delivered: remove the entry.
    case delivered
    /// Pause the entry until `notBefore` and move on to the next one; `countsAttempt` says
    /// whether the attempt reached the network (a request that could not leave the machine does
    /// not use up an attempt).
    case retry(notBefore: Date, countsAttempt: Bool, reason: String)
    /// Set the entry aside as a dead letter.
    case deadLetter(reason: String, countsAttempt: Bool)

    /// The rules of ``PersistentRequestQueue``:
    ///
    /// | outcome | decision |
    /// |---|---|
    /// | any 2xx | delivered (a 201 or 204 is a delivery, not only 200) |
    /// | any other status, any transport failure | retry after `retryInterval`, forever by default |
    /// | no route, no DNS (`notConnected`, `cannotResolveHost`), `outOfResources` | retry; the attempt does not count |
    /// | held back by the host's traffic policy (paused by a `429`/`503`, its rate, an open breaker) | retry when the host may be tried (`until`, else within a second); the attempt does not count |
    /// | the attempt limit reached (`maxAttempts`) | dead letter "ran out of attempts" |
    /// | past `expiresAt` (checked before an attempt too) | dead letter "expired" |
    /// | unreadable stored request | dead letter with the reason |
    /// | refused by the egress policy (a private, loopback or metadata address) | dead letter with the reason at once; the attempt counts |
    package static func decide(
        _ outcome: AttemptOutcome,
        attemptsBefore: Int,
        maxAttempts: Int?,
        expiresAt: Date?,
        now: Date,
        retryInterval: Duration
    ) -> DeliveryDecision {
        let countsAttempt: Bool
        let reason: String
        switch outcome {
        case .status(let code) where (200..<300).contains(code):
            return .delivered
        case .status(let code):
            countsAttempt = true
            reason = "status \(code)"
        case .transport(let kind):
            countsAttempt = NetworkFailure.of(kind).mayHaveLeftTheMachine
            reason = "transport failure: \(kind)"
        case .egressRefused(let why):
            return .deadLetter(reason: why, countsAttempt: true)
        case .unreadable(let why):
            return .deadLetter(reason: "the stored request cannot be sent: \(why)", countsAttempt: false)
        case .authentication(let why):
            countsAttempt = false
            reason = "no credential: \(why)"
        case .heldBack(let until, let why):
            if let expiresAt, now >= expiresAt {
                return .deadLetter(reason: "expired; last: \(why)", countsAttempt: false)
            }
            let soon = now.addingTimeInterval(min(retryInterval, Self.heldBackRetry).seconds)
            return .retry(notBefore: max(until ?? soon, now), countsAttempt: false, reason: why)
        }
        let attempts = attemptsBefore + (countsAttempt ? 1 : 0)
        if let maxAttempts, attempts >= maxAttempts {
            return .deadLetter(reason: "ran out of attempts (\(attempts)); last: \(reason)", countsAttempt: countsAttempt)
        }
        if let expiresAt, now >= expiresAt {
            return .deadLetter(reason: "expired; last: \(reason)", countsAttempt: countsAttempt)
        }
        return .retry(notBefore: now.addingTimeInterval(retryInterval.seconds), countsAttempt: countsAttempt, reason: reason)
    }

    /// How soon an entry held back without a date (a half-open breaker's probe is out) is tried again.
    package static let heldBackRetry: Duration = .seconds(1)

    /// Whether an entry may be attempted at all: an expired one goes to the dead letters first.
    package static func isExpired(_ entry: OfflineEntry, now: Date) -> Bool {
        entry.expiresAt.map { now >= $0 } ?? false
    }
}
