import Synchronization

/// A transport that can run at its safe point the tasks that its safe-point work resumes
/// (``CurlTransport``: ``ResumedTaskCapture``).
protocol ResumingTransport: Transport {
    /// Like ``Transport/scheduleOnTransportThread(_:)``, and the tasks `work` resumes onto the
    /// global executor run at the same safe point, until they next suspend.
    func scheduleResumptions(_ work: @escaping @Sendable () -> Void) -> Bool
}

/// Resumes the continuations of ``Session``'s async path (`send`) at the transport's next safe
/// point, all those of one round of I/O together, instead of one by one from inside libcurl's
/// completion processing; on a ``ResumingTransport``, the tasks resumed then run there too.
///
/// A resumed task would run on the cooperative pool while the transport thread goes on with its
/// round: a pool thread woken per response, and the driver woken again from `poll` by the request
/// the task sends next. Run at the safe point (``CurlTransport/Configuration/resumesTasksAtSafePoint``),
/// the task's code up to its next suspension is handled like a `response(_:)` handler: no thread
/// hop, and its next request is picked up in the same round. Where the transport cannot schedule
/// (a completion delivered off its thread, a transport without safe points), a continuation is
/// resumed at once.
final class ResumptionBatch: Sendable {
    typealias Outcome = Result<TransportResponse, TransportError>
    private typealias Item = (continuation: UnsafeContinuation<Outcome, Never>, outcome: Outcome)

    private let pending = Lock<[Item]>([])
    private let transport: any Transport
    /// `transport`, when it runs resumed tasks itself.
    private let resuming: (any ResumingTransport)?

    init(transport: any Transport) {
        self.transport = transport
        self.resuming = transport as? any ResumingTransport
    }

    /// Resumes `continuation` with `outcome` at the transport's next safe point (at once when it
    /// has none to offer).
    func resume(_ continuation: UnsafeContinuation<Outcome, Never>, with outcome: Outcome) {
        let first = pending.withLock { items -> Bool in
            items.append((continuation, outcome))
            return items.count == 1
        }
        guard first else { return }
        let scheduled =
            if let resuming {
                resuming.scheduleResumptions { self.flush() }
            } else {
                transport.scheduleOnTransportThread { self.flush() }
            }
        if !scheduled { flush() }
    }

    private func flush() {
        let items = pending.withLock { items -> [Item] in
            defer { items.removeAll(keepingCapacity: true) }
            return items
        }
        for item in items { item.continuation.resume(returning: item.outcome) }
    }
}
