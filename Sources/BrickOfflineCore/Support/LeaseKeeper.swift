import BrickRequest
import Foundation
import Synchronization

/// Keeps the leases of a queue's (or a manager's) running attempts: every third of the lease's
/// length, all of them are extended to a whole length from now in one store call
/// (``OfflineStore/extend(leases:for:now:)``: one statement on PostgreSQL), so that an attempt that
/// runs long (a slow server, heartbeats, a long time limit) is never leased again under it — by
/// another worker sharing the store, or by this process's own loop. One keeper per queue: an
/// attempt adds its entry and removes it when its outcome is written (no task or timer of its own).
///
/// It sleeps on real time, not on the session's clock: a test's manual clock must see only the
/// pauses the queue makes itself. The expiries it asks for are dates on the loop's own clock
/// (`now`, the same the loop judges leases by: its start date plus monotonic time): on the wall
/// clock, a step back of an hour (NTP, a VM resumed) made every extension an already expired
/// lease, which the loop then leased again under the running attempt (a duplicate delivery), and a
/// step forward of a day kept a dead process's lease for a day. (A PostgreSQL store takes only the
/// length from it and dates the lease by the database's clock.)
final class LeaseKeeper: Sendable {
    /// A lease being kept. The attempt calls ``settle()`` before it writes its outcome and
    /// ``stop()`` once that write returned: the lease is kept through the write, so that a slow
    /// write (a busy database) never lets it lapse and the entry be leased again — a second
    /// delivery of a request that was delivered. An extension that fails once the outcome is
    /// being written is that write settling the lease (the entry completed or rescheduled), not a
    /// loss: it is not reported.
    struct Running: Sendable {
        fileprivate let keeper: LeaseKeeper
        fileprivate let id: OfflineEntry.ID

        /// The attempt's outcome is about to be written.
        func settle() { keeper.state.withLock { $0.kept[id]?.settling = true } }
        /// The outcome is written (or the attempt was abandoned): no more extensions. The last one
        /// stopped ends the keeper's task (it holds the store: a closed queue's store must go).
        func stop() {
            keeper.state.withLock { state in
                state.kept[id] = nil
                if state.kept.isEmpty {
                    state.task?.cancel()
                    state.task = nil
                }
            }
        }
    }

    private struct Kept {
        let token: @Sendable () -> UUID?
        let duration: Duration
        let report: @Sendable (String) -> Void
        var settling = false
    }

    private struct State {
        var kept: [OfflineEntry.ID: Kept] = [:]
        /// The task extending them, while any is kept.
        var task: Task<Void, Never>?
    }

    private let store: any OfflineStore
    private let now: @Sendable () -> Date
    private let state = Lock(State())

    /// A keeper of leases in `store`.
    ///
    /// - Parameters:
    ///   - store: Where the leases live.
    ///   - now: The loop's clock, which the store's leases are judged by.
    init(store: any OfflineStore, now: @escaping @Sendable () -> Date) {
        self.store = store
        self.now = now
    }

    /// Starts keeping the lease of entry `id`: ``Running/settle()`` before the attempt's outcome
    /// is written, ``Running/stop()`` after.
    ///
    /// - Parameters:
    ///   - id: The entry.
    ///   - duration: The lease's length (a round extends by the shortest kept).
    ///   - token: The lease's token now (the manager's attempt may adopt a newer one).
    ///   - report: Told when an extension fails, or the lease turns out to be lost.
    func keep(
        _ id: OfflineEntry.ID,
        duration: Duration,
        token: @escaping @Sendable () -> UUID?,
        report: @escaping @Sendable (String) -> Void
    ) -> Running {
        state.withLock { state in
            // A lease shorter than every one kept (a manager's length changed): its first round
            // must come within a third of it, not after the running task's longer sleep.
            if let shortest = state.kept.values.map(\.duration).min(), duration < shortest {
                state.task?.cancel()
                state.task = nil
            }
            state.kept[id] = Kept(token: token, duration: duration, report: report)
            if state.task == nil {
                state.task = Task { [weak self] in await self?.extendWhileKept() }
            }
        }
        return Running(keeper: self, id: id)
    }

    /// Every third of a lease's length, extends every kept lease; ends when none is kept.
    private func extendWhileKept() async {
        while true {
            guard let length = state.withLock({ $0.kept.values.map(\.duration).min() }) else { return }
            // Cancelled when the last kept lease stops (a new keep starts a new task).
            do { try await Task.sleep(for: length / 3) } catch { return }
            let kept = state.withLock { $0.kept }
            guard let shortest = kept.values.map(\.duration).min() else { return }
            // Settling ones too: a lease is kept through its outcome's write.
            var leases: [OfflineEntry.ID: UUID] = [:]
            for (id, entry) in kept {
                if let token = entry.token() { leases[id] = token }
            }
            do {
                let lost = try await store.extend(leases: leases, for: shortest, now: now())
                if Task.isCancelled { return }
                for id in lost.sorted(by: { $0.uuidString < $1.uuidString }) where stillKept(id) {
                    // The attempt's own write did not settle it: it was lost under the attempt.
                    kept[id]?.report("the lease of \(id) was lost while its attempt ran")
                }
            } catch {
                // Attempts that stopped or began settling meanwhile have nothing to report.
                if Task.isCancelled { return }
                if let id = leases.keys.first(where: stillKept) {
                    kept[id]?.report("cannot extend the leases of \(leases.count) running attempt(s): \(error)")
                }
            }
        }
    }

    /// Whether no lease is kept and no task runs (for tests).
    var isIdle: Bool { state.withLock { $0.kept.isEmpty && $0.task == nil } }

    /// Whether `id` is still kept and its outcome not yet being written.
    private func stillKept(_ id: OfflineEntry.ID) -> Bool {
        state.withLock { $0.kept[id].map { !$0.settling } ?? false }
    }
}
