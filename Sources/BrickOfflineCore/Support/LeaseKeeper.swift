import BrickRequest
import Foundation
import Synchronization

/// Keeps an entry's lease while its attempt runs, for the queue and the manager alike: every third
/// of the lease's length it is extended to a whole length from now, so that an attempt that runs
/// long (a slow server, heartbeats, a long time limit) is never leased again under it — by another
/// worker sharing the store, or by this process's own loop.
///
/// It sleeps on real time, not on the session's clock: a test's manual clock must see only the
/// pauses the queue makes itself. The expiries it asks for are dates on the loop's own clock
/// (`now`, the same the loop judges leases by: its start date plus monotonic time): on the wall
/// clock, a step back of an hour (NTP, a VM resumed) made every extension an already expired
/// lease, which the loop then leased again under the running attempt (a duplicate delivery), and a
/// step forward of a day kept a dead process's lease for a day. (A PostgreSQL store takes only the
/// length from it and dates the lease by the database's clock.)
enum LeaseKeeper {
    /// A lease being kept. The attempt calls ``settle()`` before it writes its outcome and
    /// ``stop()`` once that write returned: the lease is kept through the write, so that a slow
    /// write (a busy database) never lets it lapse and the entry be leased again — a second
    /// delivery of a request that was delivered. An extension that fails once the outcome is
    /// being written is that write settling the lease (the entry completed or rescheduled), not a
    /// loss: it is not reported.
    struct Running: Sendable {
        fileprivate let task: Task<Void, Never>
        fileprivate let settling: Flag

        /// The attempt's outcome is about to be written.
        func settle() { settling.set() }
        /// The outcome is written (or the attempt was abandoned): no more extensions.
        func stop() { task.cancel() }
    }

    /// A flag set once, read by the keeper's task.
    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .releasing) }
        var isSet: Bool { value.load(ordering: .acquiring) }
    }

    /// Starts keeping the lease of entry `id`: ``Running/settle()`` before the attempt's outcome is
    /// written, ``Running/stop()`` after.
    ///
    /// - Parameters:
    ///   - id: The entry.
    ///   - token: The lease's token now (the manager's attempt may adopt a newer one).
    ///   - store: Where the lease lives.
    ///   - duration: The lease's length.
    ///   - now: The loop's clock, which the store's leases are judged by.
    ///   - report: Told when an extension fails, or the lease turns out to be lost.
    static func keep(
        _ id: OfflineEntry.ID,
        token: @escaping @Sendable () -> UUID?,
        store: any OfflineStore,
        duration: Duration,
        now: @escaping @Sendable () -> Date,
        report: @escaping @Sendable (String) -> Void
    ) -> Running {
        let settling = Flag()
        let task = Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: duration / 3) } catch { return }
                guard let lease = token() else { return }
                do {
                    if try await !store.extend(id, lease: lease, for: duration, now: now()) {
                        // The attempt's own write settled the lease meanwhile (it reports a loss).
                        if Task.isCancelled || settling.isSet { return }
                        report("the lease of \(id) was lost while its attempt ran")
                        return
                    }
                } catch {
                    // Stopped, or settling, while an extension was under way: nothing failed (the
                    // attempt's own write settles the lease).
                    if Task.isCancelled || settling.isSet { return }
                    report("cannot extend the lease of \(id): \(error)")
                }
            }
        }
        return Running(task: task, settling: settling)
    }
}
