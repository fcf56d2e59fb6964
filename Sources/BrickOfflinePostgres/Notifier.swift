import Logging
import PostgresNIO
import Synchronization

/// Sends the store's wake-up notifications outside the transactions that made the work, at most one
/// in flight per queue: a change while one is being sent asks for one more after it, never one per
/// change. PostgreSQL serialises the commits of transactions that `NOTIFY` (a global lock held
/// through the commit's flush), so a notification in each add would make concurrent adds take
/// turns; sent this way, sixteen producers' adds commit together and the workers still hear of them
/// within a round trip. Notifications of a queue are at least ``spacing`` apart (a burst of adds
/// from one producer sends a few, not one each; the last change of a burst is always announced). A
/// notification lost to a crash between the commit and the send is made up by the workers' poll.
final class Notifier: Sendable {
    private struct State {
        var sending: Set<String> = []
        var again: Set<String> = []
    }

    /// The least time between two notifications of one queue: what it adds to a worker's pick-up
    /// latency at most, in a burst.
    static let spacing: Duration = .milliseconds(5)

    private let client: PostgresClient
    private let channel: String
    private let sender: String
    private let logger: Logger
    private let state = Mutex(State())

    /// - Parameter sender: The store's worker name: notifications say who sent them, so that a
    ///   store's listener ignores its own (its process's loops know of their own work).
    init(client: PostgresClient, channel: String, sender: String, logger: Logger) {
        self.client = client
        self.channel = channel
        self.sender = sender
        self.logger = logger
    }

    /// A notification's payload: the sender's name, a newline, the queue.
    static func payload(sender: String, queue: String) -> String { sender + "\n" + queue }

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
                try await client.executeToEnd("SELECT pg_notify(\(channel), \(Self.payload(sender: sender, queue: queue)))", logger: logger)
            } catch {
                // The workers' poll finds the work; a notification is an optimisation.
                logger.debug("offline store could not notify", metadata: ["brick.queue": "\(queue)"])
            }
            // Changes meanwhile wait for the spacing, then share one notification.
            try? await Task.sleep(for: Self.spacing)
            let more = state.withLock { state -> Bool in
                if state.again.remove(queue) != nil { return true }
                state.sending.remove(queue)
                return false
            }
            if !more { return }
        }
    }
}
