import Logging
import PostgresNIO
import Synchronization

/// Sends the store's wake-up notifications outside the transactions that made the work, at most one
/// in flight per queue: a change while one is being sent asks for one more after it, never one per
/// change. PostgreSQL serialises the commits of transactions that `NOTIFY` (a global lock held
/// through the commit's flush), so a notification in each add would make concurrent adds take
/// turns; sent this way, sixteen producers' adds commit together and the workers still hear of them
/// within a round trip. A notification lost to a crash between the commit and the send is made up
/// by the workers' poll.
final class Notifier: Sendable {
    private struct State {
        var sending: Set<String> = []
        var again: Set<String> = []
    }

    private let client: PostgresClient
    private let channel: String
    private let logger: Logger
    private let state = Mutex(State())

    init(client: PostgresClient, channel: String, logger: Logger) {
        self.client = client
        self.channel = channel
        self.logger = logger
    }

    /// Tells the workers listening that `queue` has work; returns at once.
    func notify(_ queue: String) {
        let start = state.withLock { state -> Bool in
            if state.sending.contains(queue) {
                state.again.insert(queue)
                return false
            }
            state.sending.insert(queue)
            return true
        }
        guard start else { return }
        Task { await send(queue) }
    }

    private func send(_ queue: String) async {
        while true {
            do {
                try await client.query("SELECT pg_notify(\(channel), \(queue))", logger: logger)
            } catch {
                // The workers' poll finds the work; a notification is an optimisation.
                logger.debug("offline store could not notify", metadata: ["queue": "\(queue)"])
            }
            let more = state.withLock { state -> Bool in
                if state.again.remove(queue) != nil { return true }
                state.sending.remove(queue)
                return false
            }
            if !more { return }
        }
    }
}
