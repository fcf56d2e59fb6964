import BrickOfflineCore
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// `LISTEN` on one connection of the user's pool for as long as some queue wants wake-ups; hands
/// each notification to the queues it names. When the connection is lost it connects again (1 s,
/// doubling to 30 s) and wakes every queue, since notifications sent meanwhile are gone.
final class NotificationListener: Sendable {
    private struct State {
        var subscribers: [UUID: (queue: String, continuation: AsyncStream<Void>.Continuation)] = [:]
        var task: Task<Void, Never>?
    }

    private let client: PostgresClient
    private let channel: String
    private let ownName: String
    private let logger: Logger
    private let state = Mutex(State())

    /// - Parameter ownName: The store's worker name: its own notifications are ignored (the loops
    ///   of this process already know of the work they announce).
    init(client: PostgresClient, channel: String, ownName: String, logger: Logger) {
        self.client = client
        self.channel = channel
        self.ownName = ownName
        self.logger = logger
    }

    deinit {
        state.withLock { $0.task?.cancel() }
    }

    /// Wake-ups for `queue`; listening starts with the first subscriber and stops after the last.
    func stream(queue: String) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        let start = state.withLock { state -> Bool in
            state.subscribers[id] = (queue, continuation)
            return state.task == nil
        }
        if start {
            let task = Task { [weak self] in
                guard let self else { return }
                await self.listen()
            }
            state.withLock { state in
                if state.task == nil && !state.subscribers.isEmpty { state.task = task } else { task.cancel() }
            }
        }
        return stream
    }

    private func unsubscribe(_ id: UUID) {
        let task = state.withLock { state -> Task<Void, Never>? in
            state.subscribers[id] = nil
            guard state.subscribers.isEmpty else { return nil }
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
    }

    /// Wakes this process's loops waiting on `queue` (work this store made itself).
    func wakeLocally(queue: String) {
        wake(queue: queue)
    }

    private func wake(queue: String?) {
        let continuations = state.withLock { state in
            state.subscribers.values.filter { queue == nil || $0.queue == queue }.map(\.continuation)
        }
        continuations.forEach { $0.yield() }
    }

    private func listen() async {
        var backoff: Duration = .seconds(1)
        var failed = false
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        if failed {
                            logger.info("offline store listens again", metadata: ["db.postgresql.channel": "\(channel)"])
                            failed = false
                        }
                        backoff = .seconds(1)
                        // Anything sent while no one listened is lost: every queue looks now.
                        wake(queue: nil)
                        for try await notification in notifications {
                            // "sender\nqueue"; a payload of another form wakes every queue.
                            let parts = notification.payload.split(separator: "\n", maxSplits: 1)
                            guard parts.count == 2 else {
                                wake(queue: nil)
                                continue
                            }
                            if parts[0] != ownName { wake(queue: String(parts[1])) }
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                if !failed {
                    logger.warning(
                        "offline store lost its LISTEN connection; queues poll until it is back",
                        metadata: ["db.postgresql.channel": "\(channel)", "error.message": "\(PostgresOfflineStore.storeError(error, doing: "listen"))"]
                    )
                }
                failed = true
            }
            if Task.isCancelled { return }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(30))
        }
    }
}
