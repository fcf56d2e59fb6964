import Dispatch
import Synchronization

/// Where `response(_:)` handlers run.
///
/// Handlers are queued in a list that is drained in batches: one drain is scheduled only when none
/// is pending, so a burst of responses costs one scheduling, not one per request.
public struct CallbackQueue: Sendable {
    enum Kind: Sendable {
        case dispatch(DispatchQueue)
        /// A private serial queue whose drains may run on the transport's thread.
        case serial(DispatchQueue)
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

    /// Handlers run directly inside the transport's completions. Only for handlers that are short
    /// and never block: while one runs, no other request of the transport makes progress, however
    /// long it takes. The default ``serial(label:)`` queue also runs handlers on the transport's
    /// thread when it can, without that risk (a standby thread takes the I/O over from a handler
    /// that runs long); this one saves only its bookkeeping, a lock per response.
    public static let transportThread = CallbackQueue(kind: .transportThread)

    /// A private serial queue (the default): handlers run one at a time, in completion order.
    ///
    /// When the transport offers it (`ThreadedTransport.scheduleOnTransportThread(_:)`, as
    /// ``CurlTransport`` does), the queue is drained on the transport's own thread right after the
    /// responses arrive, with no thread hop; a handler that runs long (past
    /// `stallLimit`) keeps that thread while a standby takes the I/O
    /// over, so handlers may block. Otherwise — and for handlers queued from other threads — the
    /// drain runs on a Dispatch queue labelled `label`.
    ///
    /// - Parameter label: The label of the Dispatch queue.
    /// - Returns: The callback queue.
    public static func serial(label: String = "BrickRequest.callbacks") -> CallbackQueue {
        CallbackQueue(kind: .serial(DispatchQueue(label: label)))
    }
}

/// Runs work on a ``CallbackQueue``, draining queued items in batches.
final class CallbackDispatcher: Sendable {
    /// A piece of work: a closure, or an exchange's result to deliver (the common case, which
    /// needs no closure and so no allocation).
    private enum Item {
        case work(@Sendable () -> Void)
        case delivery(Exchange, Result<TransportResponse, TransportError>)
        /// What a slot holds once its item has been taken out to run.
        case nothing

        consuming func run() {
            switch consume self {
            case .work(let work): work()
            case .delivery(let exchange, let result): exchange.deliver(result)
            case .nothing: break
            }
        }
    }

    private struct Pending {
        var items: [Item] = []
        var scheduled = false
    }

    private let queue: DispatchQueue?
    /// The transport's ``ThreadedTransport/scheduleOnTransportThread(_:)``, set when drains may run on its
    /// thread (a closure: calling it costs less than copying the transport's existential).
    private let scheduleOnTransportThread: (@Sendable (@escaping @Sendable () -> Void) -> Bool)?
    private let pending = Lock(Pending())

    init(_ callbackQueue: CallbackQueue, transport: any Transport) {
        switch callbackQueue.kind {
        case .dispatch(let queue): (self.queue, scheduleOnTransportThread) = (queue, nil)
        case .serial(let queue):
            self.queue = queue
            if let threaded = transport as? any ThreadedTransport {
                scheduleOnTransportThread = { threaded.scheduleOnTransportThread($0) }
            } else {
                scheduleOnTransportThread = nil
            }
        case .transportThread: (self.queue, scheduleOnTransportThread) = (nil, nil)
        }
    }

    func submit(_ work: @escaping @Sendable () -> Void) {
        submit(.work(work))
    }

    /// Returns once everything submitted before the call has run.
    func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            submit { continuation.resume() }
        }
    }

    /// Delivers `result` through `exchange` (``Exchange/deliver(_:)``).
    func submit(_ exchange: consuming Exchange, _ result: consuming Result<TransportResponse, TransportError>) {
        submit(.delivery(exchange, result))
    }

    private func submit(_ item: consuming Item) {
        guard let queue else {
            item.run()
            return
        }
        // Moved into the list, not copied (a copy of an item costs reference counting on its parts).
        var item = Optional(item)
        let schedule = pending.withLock { pending -> Bool in
            pending.items.append(item.take().unsafelyUnwrapped)
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        if schedule {
            if let scheduleOnTransportThread, scheduleOnTransportThread({ self.drain() }) { return }
            queue.async { self.drain() }
        }
    }

    private func drain() {
        var batch: [Item] = []
        while true {
            pending.withLock { pending in
                swap(&pending.items, &batch)
                if batch.isEmpty { pending.scheduled = false }
            }
            if batch.isEmpty { return }
            // Each item is moved out and run, in order; its slot gets a placeholder that costs
            // nothing to destroy (iterating would copy every item, reversing would copy twice).
            batch.withUnsafeMutableBufferPointer { items in
                for index in items.indices {
                    let slot = items.baseAddress.unsafelyUnwrapped + index
                    let item = slot.move()
                    slot.initialize(to: .nothing)
                    item.run()
                }
            }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
