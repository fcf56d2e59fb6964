import Foundation
import Logging
import Synchronization

/// Says loudly when the workers of a fleet claim one queue with different caps: the database
/// holds every claim to the smallest cap a live lease was taken with (so a larger one never
/// breaks it), and this warning tells the operator which caps it saw. Looks at most once a
/// minute per queue; one warning per distinct set of caps.
final class CapWatch: Sendable {
    private struct State {
        var lastLook: [String: ContinuousClock.Instant] = [:]
        var warned: [String: Set<Int>] = [:]
    }

    private let state = Mutex(State())
    /// How often one queue is looked at.
    static let interval: Duration = .seconds(60)

    /// Looks, if it is time, at the caps the live leases of `queue` were claimed with; warns when
    /// one differs from `cap`.
    func check(queue: String, cap: Int, store: PostgresOfflineStore) async {
        let now = ContinuousClock.now
        let due = state.withLock { state -> Bool in
            if let last = state.lastLook[queue], now - last < Self.interval { return false }
            state.lastLook[queue] = now
            return true
        }
        guard due, let caps = try? await store.liveLeaseCaps(queue: queue) else { return }
        let all = caps.union([cap])
        guard all.count > 1 else { return }
        let isNew = state.withLock { state -> Bool in
            guard state.warned[queue] != all else { return false }
            state.warned[queue] = all
            return true
        }
        guard isNew else { return }
        let smallest = all.min() ?? cap
        store.logger.warning(
            "workers claim this queue with different simultaneousRequestCap values; the fleet holds to the smallest: give every worker the same cap",
            metadata: [
                "brick.queue": "\(queue)",
                "brick.queue.caps": "\(all.sorted().map(String.init).joined(separator: ","))",
                "brick.queue.cap_in_force": "\(smallest)",
                "brick.worker": "\(store.workerName)",
            ]
        )
    }
}
