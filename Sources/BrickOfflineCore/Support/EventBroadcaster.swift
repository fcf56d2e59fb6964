import BrickRequest
import Foundation
import Synchronization

/// Hands events to every subscriber; keeps the last 1,000 for the first one while there is none.
final class EventBroadcaster<Event: Sendable>: Sendable {
    private struct State {
        var subscribers: [UUID: AsyncStream<Event>.Continuation] = [:]
        var backlog: [Event] = []
        var finished = false
    }

    private let state = Lock(State())

    func stream() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(1000))
        let id = UUID()
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        let backlog = state.withLock { state -> [Event]? in
            if state.finished { return nil }
            state.subscribers[id] = continuation
            defer { state.backlog = [] }
            return state.backlog
        }
        guard let backlog else {
            continuation.finish()
            return stream
        }
        backlog.forEach { continuation.yield($0) }
        return stream
    }

    func emit(_ event: Event) {
        let subscribers = state.withLock { state -> [AsyncStream<Event>.Continuation] in
            if state.subscribers.isEmpty && !state.finished {
                state.backlog.append(event)
                if state.backlog.count > 1000 { state.backlog.removeFirst(state.backlog.count - 1000) }
            }
            return Array(state.subscribers.values)
        }
        subscribers.forEach { $0.yield(event) }
    }

    func finish() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        subscribers.forEach { $0.finish() }
    }
}
