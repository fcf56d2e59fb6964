import BrickRequest
import Foundation

/// Keeps an entry's lease while its attempt runs, for the queue and the manager alike: every third
/// of the lease's length it is extended to a whole length from now, so that an attempt that runs
/// long (a slow server, heartbeats, a long time limit) is never leased again under it — by another
/// worker sharing the store, or by this process's own loop.
///
/// It runs on real time, not on the session's clock: a test's manual clock must see only the
/// pauses the queue makes itself; and the expiries it asks for are real dates, since a store
/// shared by several processes judges leases by a clock they all share.
enum LeaseKeeper {
    /// Starts keeping the lease of entry `id`; cancel the returned task when the attempt ends.
    ///
    /// - Parameters:
    ///   - id: The entry.
    ///   - token: The lease's token now (the manager's attempt may adopt a newer one).
    ///   - store: Where the lease lives.
    ///   - duration: The lease's length.
    ///   - report: Told when an extension fails, or the lease turns out to be lost.
    static func keep(
        _ id: OfflineEntry.ID,
        token: @escaping @Sendable () -> UUID?,
        store: any OfflineStore,
        duration: Duration,
        report: @escaping @Sendable (String) -> Void
    ) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: duration / 3) } catch { return }
                guard let lease = token() else { return }
                do {
                    if try await !store.extend(id, lease: lease, until: Date().addingTimeInterval(duration.seconds)) {
                        if Task.isCancelled { return }  // the attempt ended and settled it meanwhile
                        report("the lease of \(id) was lost while its attempt ran")
                        return
                    }
                } catch {
                    // Cancelled with its attempt's end while an extension was under way: nothing
                    // failed (the attempt's own write settles the lease).
                    if Task.isCancelled { return }
                    report("cannot extend the lease of \(id): \(error)")
                }
            }
        }
    }
}
