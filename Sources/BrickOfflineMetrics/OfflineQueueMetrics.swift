public import BrickOfflineCore
public import CoreMetrics
import FoundationEssentials
public import ServiceLifecycle

/// Records a `BrickOfflineCore.PersistentRequestQueue` through swift-metrics, as a `Service` of
/// swift-service-lifecycle: run it beside the queue (in a `ServiceGroup`, or a task of your own);
/// it records until the queue is closed, graceful shutdown begins, or its task is cancelled.
///
/// ```swift
/// let group = ServiceGroup(
///     services: [OfflineQueueService(queue), OfflineQueueMetrics(queue)],
///     gracefulShutdownSignals: [.sigterm],
///     logger: logger
/// )
/// ```
///
/// Every metric carries the dimension `brick.queue` (the queue's name):
/// - `brick.queue.depth` (`Gauge`): pending entries, leased ones included, dead letters not;
/// - `brick.queue.deliveries` (`Counter`), with `http.response.status_code`;
/// - `brick.queue.retries_scheduled` (`Counter`): attempts that failed, the entry kept for later;
/// - `brick.queue.dead_letters` (`Counter`): entries set aside;
/// - `brick.queue.oldest_entry.age` (`Gauge`, seconds): the age of the oldest pending entry, 0 when
///   empty, sampled every `sampleInterval` (one indexed query).
public struct OfflineQueueMetrics: Service {
    /// The queue recorded.
    public let queue: PersistentRequestQueue
    /// How often the oldest entry's age is read.
    public let sampleInterval: Duration
    private let factory: (any MetricsFactory)?

    /// Creates the recorder.
    ///
    /// - Parameters:
    ///   - queue: The queue to record.
    ///   - sampleInterval: How often the oldest entry's age is read. Default 10 s.
    ///   - factory: Where metrics go; `nil` (the default) for the process's (`MetricsSystem.factory`).
    public init(_ queue: PersistentRequestQueue, sampleInterval: Duration = .seconds(10), factory: (any MetricsFactory)? = nil) {
        self.queue = queue
        self.sampleInterval = sampleInterval
        self.factory = factory
    }

    /// Records until the queue is closed (its event streams end), graceful shutdown begins, or the
    /// task is cancelled.
    public func run() async {
        let recorder = self
        await cancelWhenGracefulShutdown { await recorder.record() }
    }

    private func record() async {
        let factory = self.factory ?? MetricsSystem.factory
        let name = [("brick.queue", queue.name)]
        let depth = Gauge(label: "brick.queue.depth", dimensions: name, factory: factory)
        let age = Gauge(label: "brick.queue.oldest_entry.age", dimensions: name, factory: factory)
        let retries = Counter(label: "brick.queue.retries_scheduled", dimensions: name, factory: factory)
        let deadLetters = Counter(label: "brick.queue.dead_letters", dimensions: name, factory: factory)
        let (queue, interval) = (self.queue, sampleInterval)
        let (events, counts) = (queue.events, queue.counts)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await count in counts { depth.record(count) }
            }
            group.addTask {
                while !Task.isCancelled {
                    if let oldest = try? await queue.oldestEntryDate() {
                        age.record(max(0, Date().timeIntervalSince(oldest)))
                    } else {
                        age.record(0)
                    }
                    try? await Task.sleep(for: interval)
                }
            }
            // Ends when the queue is closed (its streams end) or the task is cancelled.
            for await event in events {
                switch event {
                case .delivered(_, let status):
                    Counter(
                        label: "brick.queue.deliveries",
                        dimensions: name + [("http.response.status_code", String(status))],
                        factory: factory
                    ).increment()
                case .paused: retries.increment()
                case .deadLettered: deadLetters.increment()
                case .storeRecovered, .storeFailed: break
                }
            }
            group.cancelAll()
        }
    }
}
