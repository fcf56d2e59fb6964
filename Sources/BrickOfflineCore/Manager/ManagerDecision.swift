import BrickRequest
import Foundation

/// What an ``OfflineRequestManager`` does after an attempt: the pure decision, tested by a table
/// without I/O (as ``DeliveryDecision`` is for the queue).
///
/// | outcome | decision |
/// |---|---|
/// | success | ``finished`` |
/// | the time limit ran out (``OfflineRequestTimeout``) | ``fail(reason:)`` — never retried |
/// | refused by the egress policy (``BrickError/Code/egressRefused``) | ``fail(reason:)`` — never retried |
/// | a network-class failure (``NetworkFailure/isNetwork``) | ``keep(notBefore:reason:)`` after the submission interval; not counted |
/// | held back by the host's traffic policy with a date (`heldBackUntil`, from ``BrickError/notBefore``) | ``keep(notBefore:reason:)`` until that date; not counted |
/// | any other failure the request or the delegate asks to retry | ``again(reason:)``, at once; counted |
/// | any other failure | ``fail(reason:)`` |
package enum ManagerDecision: Sendable, Hashable {
    /// Done: remove the entry.
    case finished
    /// Kept for when the network is back: attempted again at `notBefore` (or when reachability
    /// changes); the attempt does not count.
    case keep(notBefore: Date, reason: String)
    /// Attempted again at once, as the request or the delegate asked; the attempt counts.
    case again(reason: String)
    /// Failed for good: set aside as a dead letter.
    case fail(reason: String)

    /// The decision for `outcome`.
    ///
    /// - Parameters:
    ///   - outcome: How the attempt ended.
    ///   - now: When it ended.
    ///   - heldBackUntil: For a request the host's traffic policy held back, when it may be tried
    ///     (on the manager's clock); `nil` otherwise.
    ///   - submissionInterval: How long a kept request waits.
    ///   - resubmissionAsked: Whether the request or the delegate wants another attempt after this
    ///     error (asked only for failures that are neither timeouts nor network-class).
    package static func decide(
        _ outcome: Result<Void, any Error>,
        now: Date,
        heldBackUntil: Date? = nil,
        submissionInterval: Duration,
        resubmissionAsked: (any Error) -> Bool
    ) -> ManagerDecision {
        switch outcome {
        case .success:
            return .finished
        case .failure(let error) where error is OfflineRequestTimeout:
            return .fail(reason: "\(error)")
        case .failure(let error) where (error as? BrickError)?.code == .egressRefused
            || (error as? TransportError)?.kind == .egressRefused:
            return .fail(reason: "\(error)")
        case .failure(let error) where NetworkFailure.of(error).isNetwork:
            return .keep(notBefore: heldBackUntil ?? now.addingTimeInterval(submissionInterval.seconds), reason: "\(error)")
        case .failure(let error):
            return resubmissionAsked(error) ? .again(reason: "\(error)") : .fail(reason: "\(error)")
        }
    }
}

extension ManagerDecision {
    /// Overall progress: (completed + the running requests' fractions) / (completed + outstanding),
    /// in 0...1; 1 when nothing is outstanding.
    package static func progress(completed: Int, running: [Double], outstanding: Int) -> Double {
        let total = completed + outstanding
        guard outstanding > 0 else { return 1 }
        return min(max((Double(completed) + running.reduce(0, +)) / Double(max(1, total)), 0), 1)
    }
}
