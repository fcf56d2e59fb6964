import BrickRequest
import Foundation
import Synchronization

/// What wakes a processing loop besides its own process: the store's wake-ups (another process
/// made work) and, for a store shared by several processes, a poll in case one was missed. Both
/// run on real time, never on a test's manual clock.
enum StoreWakeUps {
    /// Starts the tasks that wake `signal` for `queue` of `store`; cancel them to stop.
    static func start(store: any OfflineStore, queue: String, signal: LoopSignal) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        if let wakeUps = store.wakeUps(queue: queue) {
            tasks.append(Task { [weak signal] in
                for await _ in wakeUps {
                    guard let signal else { return }
                    signal.wake()
                }
            })
        }
        if let interval = store.pollInterval {
            tasks.append(Task { [weak signal] in
                while !Task.isCancelled {
                    do { try await Task.sleep(for: interval) } catch { return }
                    guard let signal else { return }
                    signal.wake()
                }
            })
        }
        return tasks
    }
}
