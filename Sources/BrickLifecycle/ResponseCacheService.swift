public import BrickRequest
public import Logging
public import ServiceLifecycle

/// Flushes a response cache when its service group shuts down gracefully, as a `Service` of
/// swift-service-lifecycle: `SQLiteResponseCache` writes behind (the responses a request stored
/// reach the file a moment later, off the request's path), and a process that exits on SIGTERM
/// right after must not drop what it learned last.
///
/// ```swift
/// let cache = try SQLiteResponseCache(directory: cacheDirectory)
/// let group = ServiceGroup(
///     services: [ResponseCacheService(cache), server],
///     gracefulShutdownSignals: [.sigterm],
///     logger: logger
/// )
/// try await group.run()
/// ```
///
/// It runs until graceful shutdown, then calls `flush()` (waiting until every write handed to the
/// cache's writer is on disk) and returns. A flush that fails is logged (the process is shutting
/// down: there is no one else to tell) and the service returns all the same. Cancelled instead of
/// shut down, it flushes too.
public struct ResponseCacheService: Service {
    /// The cache it flushes.
    public let cache: any ResponseCache
    /// Where a failed flush is logged.
    public let logger: Logger

    /// Creates the service.
    ///
    /// - Parameters:
    ///   - cache: The cache to flush at shutdown (an `SQLiteResponseCache`; any `ResponseCache`).
    ///   - logger: Where a failed flush is logged. Default: a logger labelled
    ///     `BrickLifecycle.ResponseCacheService`.
    public init(_ cache: any ResponseCache, logger: Logger = Logger(label: "BrickLifecycle.ResponseCacheService")) {
        self.cache = cache
        self.logger = logger
    }

    /// Waits for graceful shutdown (or cancellation), then flushes the cache.
    public func run() async throws {
        _ = await graceAfterShutdown(.zero)
        do {
            try cache.flush()
        } catch {
            logger.error("the response cache could not be flushed at shutdown", metadata: ["error.message": "\(error.message)"])
        }
    }
}
