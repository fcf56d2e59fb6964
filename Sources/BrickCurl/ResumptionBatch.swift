import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The continuations a ``CurlDriver``'s completions resume, gathered during a round of I/O and
/// resumed together at its next safe point, where the tasks they wake then run
/// (``ResumedTaskCapture``, `resumesTasksAtSafePoint`).
///
/// A task resumed from inside libcurl's completion processing would run on the cooperative pool
/// while the driver goes on with its round: a pool thread woken per response, and the driver
/// woken again from `poll` by the request the task sends next. Resumed at the safe point and run
/// there, the task's code up to its next suspension is handled like a `response(_:)` handler: no
/// thread hop, and its next request is picked up in the same round. A completion delivered off the
/// driver's thread (none today), or a driver whose `stallLimit` is zero, resumes at once.
final class ResumptionBatch: Sendable {
    typealias Outcome = Result<TransportResponse, TransportError>
    private typealias Item = (continuation: UnsafeContinuation<Outcome, Never>, outcome: Outcome)

    private let pending = Lock<[Item]>([])
    private let driver: CurlDriver

    init(driver: CurlDriver) {
        self.driver = driver
    }

    /// Resumes `continuation` with `outcome` at the driver's next safe point (at once when it has
    /// none to offer).
    func resume(_ continuation: UnsafeContinuation<Outcome, Never>, with outcome: Outcome) {
        let first = pending.withLock { items -> Bool in
            items.append((continuation, outcome))
            return items.count == 1
        }
        guard first else { return }
        let flush: @Sendable () -> Void = { self.flush() }
        let work: CurlDriver.SafePointWork =
            driver.capturesResumedTasks ? .resumptions(flush) : .work(flush)
        if !driver.scheduleAtSafePoint(work) { self.flush() }
    }

    private func flush() {
        let items = pending.withLock { items -> [Item] in
            defer { items.removeAll(keepingCapacity: true) }
            return items
        }
        for item in items { item.continuation.resume(returning: item.outcome) }
    }
}
