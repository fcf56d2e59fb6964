public import BrickOfflineCore
public import ServiceLifecycle

/// Runs an `BrickOfflineCore.OfflineRequestManager` as a `Service` of swift-service-lifecycle: it
/// starts submitting when run; on graceful shutdown (SIGTERM through a `ServiceGroup`) it stops
/// taking requests, lets the attempts under way end for up to `gracePeriod` and store their
/// outcomes, cancels and hands back those still running, and returns
/// (`BrickOfflineCore.OfflineRequestManager.stop(gracePeriod:)`). Cancelled
/// instead, it returns at once; what was running is attempted again by the next manager on the
/// store. Nothing stored is lost either way.
///
/// ```swift
/// let group = ServiceGroup(
///     services: [OfflineRequestManagerService(manager)],
///     gracefulShutdownSignals: [.sigterm],
///     logger: logger
/// )
/// try await group.run()
/// ```
public struct OfflineRequestManagerService: Service {
    /// The manager it runs.
    public let manager: OfflineRequestManager
    /// How long attempts under way may take to end after shutdown begins.
    public let gracePeriod: Duration

    /// Creates the service.
    ///
    /// - Parameters:
    ///   - manager: The manager to run.
    ///   - gracePeriod: How long attempts under way may take to end at shutdown. Default 10 s.
    public init(_ manager: OfflineRequestManager, gracePeriod: Duration = .seconds(10)) {
        self.manager = manager
        self.gracePeriod = gracePeriod
    }

    /// Submits requests until graceful shutdown or cancellation, then stops as described above.
    public func run() async throws {
        manager.attemptSubmission()
        await manager.stop(gracePeriod: await graceAfterShutdown(gracePeriod))
    }
}
