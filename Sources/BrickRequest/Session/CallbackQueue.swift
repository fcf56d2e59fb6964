import Dispatch
import Synchronization

/// Where `response(_:)` handlers run.
///
/// Completions leave the transport's thread in batches: the transport appends finished requests to
/// a list and schedules one drain on the queue only when none is pending, so a burst of responses
/// costs one thread hop, not one per request.
public struct CallbackQueue: Sendable {
    enum Kind: Sendable {
        case dispatch(DispatchQueue)
        case transportThread
    }

    let kind: Kind

    /// Handlers run on `queue`, in completion order when the queue is serial.
    ///
    /// - Parameter queue: The queue; a serial one keeps handlers in order.
    /// - Returns: The callback queue.
    public static func dispatch(_ queue: DispatchQueue) -> CallbackQueue {
        CallbackQueue(kind: .dispatch(queue))
    }

    /// Handlers run directly on the transport's thread, with no hop at all. Only for handlers that
    /// are short and never block: while one runs, no other request of the session makes progress.
    public static let transportThread = CallbackQueue(kind: .transportThread)

    /// A new private serial queue.
    ///
    /// - Parameter label: The queue's label.
    /// - Returns: The callback queue.
    public static func serial(label: String = "BrickRequest.callbacks") -> CallbackQueue {
        .dispatch(DispatchQueue(label: label))
    }
}

/// Runs work on a ``CallbackQueue``, draining queued items in batches.
final class CallbackDispatcher: Sendable {
    private struct Pending {
        var items: [@Sendable () -> Void] = []
        var scheduled = false
    }

    private let queue: DispatchQueue?
    private let pending = Mutex(Pending())

    init(_ callbackQueue: CallbackQueue) {
        switch callbackQueue.kind {
        case .dispatch(let queue): self.queue = queue
        case .transportThread: self.queue = nil
        }
    }

    func submit(_ work: @escaping @Sendable () -> Void) {
        guard let queue else {
            work()
            return
        }
        let schedule = pending.withLock { pending -> Bool in
            pending.items.append(work)
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        if schedule {
            queue.async { self.drain() }
        }
    }

    private func drain() {
        var batch: [@Sendable () -> Void] = []
        while true {
            pending.withLock { pending in
                swap(&pending.items, &batch)
                if batch.isEmpty { pending.scheduled = false }
            }
            if batch.isEmpty { return }
            for work in batch { work() }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
