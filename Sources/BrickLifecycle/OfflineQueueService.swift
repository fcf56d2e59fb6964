public import BrickOfflineCore
public import ServiceLifecycle

/// Runs a `PersistentRequestQueue`'s processing as a `Service` of swift-service-lifecycle: it
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
        await queue.stopProcessing(gracePeriod: await graceAfterShutdown(gracePeriod))
    }
}

/// Waits for graceful shutdown, then says how long the work under way may take to end:
/// `gracePeriod`, or nothing when the task was cancelled instead.
func graceAfterShutdown(_ gracePeriod: Duration) async -> Duration {
    do {
        // Returns at graceful shutdown; throws when the task is cancelled.
        try await gracefulShutdown()
        return gracePeriod
    } catch {
        return .zero
    }
}
