import FoundationEssentials
import Synchronization

/// The subscribers of a ``ReachabilityMonitor``'s ``ReachabilityMonitor/changes()``: each
/// subscription is a stream that keeps the newest notification only; one notification reaches them
/// all. Shared by ``NetlinkReachability`` and `BrickTesting`'s `ManualReachability`. One lock guards
/// the subscriber list.
package final class ReachabilityChanges: Sendable {
    private let subscribers = Lock<[UUID: AsyncStream<Void>.Continuation]>([:])

    package init() {}

    /// A new subscription; it leaves the list when its stream ends.
    package func subscribe() -> AsyncStream<Void> {
        let id = UUID()
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        subscribers.withLock { $0[id] = continuation }
        return stream
    }

    /// Tells every subscriber that something may have changed.
    package func notify() {
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield() }
    }

    /// How many subscriptions are active.
    package var count: Int { subscribers.withLock { $0.count } }
}
