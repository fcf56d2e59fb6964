public import BrickOffline
public import ServiceLifecycle

/// Runs a ``PersistentRequestQueue``'s processing as a `Service` of swift-service-lifecycle: it
/// starts processing when run; on graceful shutdown (SIGTERM through a `ServiceGroup`) it stops
/// claiming, lets the attempts under way finish for up to `gracePeriod`, hands the rest back (their
/// leases released, so another worker takes them at once, no attempt counted) and returns.
/// Cancelled instead, it hands everything back at once.
///
/// ```swift
/// let group = ServiceGroup(
///     services: [client, OfflineQueueService(queue)],   // the PostgresClient is a Service too
///     gracefulShutdownSignals: [.sigterm],
///     logger: logger
/// )
/// try await group.run()
/// ```
public struct OfflineQueueService: Service {
    /// The queue it runs.
    public let queue: PersistentRequestQueue
    /// How long attempts under way may finish after shutdown begins.
    public let gracePeriod: Duration

    /// Creates the service.
    ///
    /// - Parameters:
    ///   - queue: The queue to process.
    ///   - gracePeriod: How long attempts under way may finish at shutdown. Default 10 s.
    public init(_ queue: PersistentRequestQueue, gracePeriod: Duration = .seconds(10)) {
        self.queue = queue
        self.gracePeriod = gracePeriod
    }

    /// Processes the queue until graceful shutdown or cancellation, then stops as described above.
    public func run() async throws {
        queue.startProcessing()
        // Returns at graceful shutdown; throws when the task is cancelled.
        let cancelled: Bool
        do {
            try await gracefulShutdown()
            cancelled = false
        } catch {
            cancelled = true
        }
        await queue.stopProcessing(gracePeriod: cancelled ? .zero : gracePeriod)
    }
}
