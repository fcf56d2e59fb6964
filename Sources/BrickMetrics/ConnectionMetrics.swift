public import BrickRequest
public import CoreMetrics
public import ServiceLifecycle

/// Records a session's connections per destination through swift-metrics — what
/// AsyncHTTPClient's users have asked for (AHC #342) — as a `Service` of swift-service-lifecycle:
/// run it beside your other services, or in a task of your own. Every `sampleInterval` it reads the
/// session's `BrickRequest.CurlTransport.connectionCounts()` (on the transport's thread, costing
/// no request anything) and records, with `server.address` and `server.port`:
/// - `brick.client.connections.open` (`Gauge`): connections open (connecting ones included);
/// - `brick.client.connections.idle` (`Gauge`): open connections that carry no transfer, kept for
///   reuse.
///
/// A destination whose connections all closed is recorded once more, at 0. A session whose
/// transport is not a `BrickRequest.CurlTransport` records nothing.
///
/// ```swift
/// let group = ServiceGroup(services: [ConnectionMetrics(session: .api)], logger: logger)
/// ```
public struct ConnectionMetrics: Service {
    /// The session whose connections are recorded.
    public let session: Session
    /// How often they are counted.
    public let sampleInterval: Duration
    private let factory: (any MetricsFactory)?

    /// Creates the recorder.
    ///
    /// - Parameters:
    ///   - session: The session whose connections are recorded.
    ///   - sampleInterval: How often they are counted. Default 10 s.
    ///   - factory: Where metrics go; `nil` (the default) for the process's (`MetricsSystem.factory`).
    public init(session: Session, sampleInterval: Duration = .seconds(10), factory: (any MetricsFactory)? = nil) {
        self.session = session
        self.sampleInterval = sampleInterval
        self.factory = factory
    }

    /// Records until graceful shutdown begins or the task is cancelled.
    public func run() async {
        guard let transport = session.transport as? CurlTransport else { return }
        let factory = self.factory ?? MetricsSystem.factory
        let interval = sampleInterval
        await cancelWhenGracefulShutdown {
            var seen: Set<CurlTransport.HostConnections.Destination> = []
            while !Task.isCancelled {
                let counts = await transport.connectionCounts()
                var now: Set<CurlTransport.HostConnections.Destination> = []
                for entry in counts {
                    now.insert(entry.destination)
                    Self.record(entry.destination, open: entry.open, idle: entry.idle, factory: factory)
                }
                for gone in seen.subtracting(now) { Self.record(gone, open: 0, idle: 0, factory: factory) }
                seen = now
                try? await Task.sleep(for: interval)
            }
        }
    }

    private static func record(
        _ destination: CurlTransport.HostConnections.Destination,
        open: Int,
        idle: Int,
        factory: any MetricsFactory
    ) {
        let dimensions = [("server.address", destination.host), ("server.port", String(destination.port))]
        Gauge(label: "brick.client.connections.open", dimensions: dimensions, factory: factory).record(open)
        Gauge(label: "brick.client.connections.idle", dimensions: dimensions, factory: factory).record(idle)
    }
}

extension CurlTransport.HostConnections {
    /// A destination: host and port.
    struct Destination: Hashable {
        var host: String
        var port: Int
    }

    var destination: Destination { Destination(host: host, port: port) }
}
