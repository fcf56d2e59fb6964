import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP/1.1 server on `127.0.0.1` for tests, the demo and users' own tests.
///
/// It answers httpbin-like routes and can be scripted, per path, to misbehave: reset the connection,
/// stall, drip, answer 503 twice then 200. It records every request and counts connections, so a
/// test asserts on what the server actually received.
///
/// ```swift
/// let server = try BrickTestServer.start()
/// defer { server.shutdown() }
/// server.script("/orders", [.status(503), .status(503), .ok("{}")])
/// // ... run the client against server.baseURL ...
/// #expect(server.requests(path: "/orders").count == 3)
/// ```
///
/// Routes:
/// | route | answer |
/// |---|---|
/// | `/anything…`, `/get`, `/post`, `/put`, `/patch`, `/delete` | JSON echo: `method`, `path`, `url`, `args`, `headers`, `data`, `form`, `files`, `json` |
/// | `/status/N` | status N; `?retry_after=V` adds `Retry-After: V` |
/// | `/delay/S` | the echo, after S seconds (fractions allowed) |
/// | `/drip?numbytes=N&duration=S&delay=D&code=C` | N bytes spread over S seconds |
/// | `/redirect/N` | 302 chain of N hops ending at `/get` |
/// | `/redirect-to?url=U&status_code=C` | redirect to U |
/// | `/gzip` | gzip-encoded JSON; `?zeros=N` a gzip body of N zero bytes (a bomb) |
/// | `/bytes/N` | N bytes (`i % 256`) with `Content-Length` |
/// | `/stream/N` | N JSON lines, chunked |
/// | `/stream-bytes/N?chunk_size=C` | N bytes, chunked |
/// | `/range/N?etag=E` | N bytes with an `ETag`; honours `Range` and `If-Range` (206, 416) |
/// | `/sse/N?interval_ms=M&hold=1` | N server-sent events, one every M ms; `hold=1` never ends |
/// | `/response-headers?K=V…` | those headers |
/// | `/headers` | `{"headers": …}` |
/// | `/cache/NAME?max_age=N&cc=V&etag=0&lm=0&vary=F&age=A&expires=S&status=C` | a cacheable resource: JSON `{"path", "version", "vary", "served"}` with `ETag` `"vN"` and `Last-Modified` (each omitted with `=0`), `Date`, `Cache-Control: max-age=N` (or `cc`'s value), `Vary: F` (the body shows the request's values of those fields), `Age: A`, `Expires` S seconds from now; answers a matching `If-None-Match` / `If-Modified-Since` with `304` and no body. ``changeResource(_:)`` makes a new version. |
public final class BrickTestServer: Sendable {
    /// The port the server listens on (chosen by the kernel); 0 for a Unix domain socket server.
    public let port: Int
    /// The Unix domain socket the server listens on, for a server started with
    /// ``start(unixSocketPath:)``; `nil` for a TCP server.
    public let unixSocketPath: String?
    let state: ServerState
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel

    /// `http://127.0.0.1:PORT`, or `http://localhost` for a Unix domain socket server (send its
    /// requests through the socket: `CurlTransport.Configuration.unixSocketPath`).
    public var baseURL: String { unixSocketPath == nil ? "http://127.0.0.1:\(port)" : "http://localhost" }

    private init(
        port: Int,
        unixSocketPath: String? = nil,
        state: ServerState,
        group: MultiThreadedEventLoopGroup,
        channel: any Channel
    ) {
        self.port = port
        self.unixSocketPath = unixSocketPath
        self.state = state
        self.group = group
        self.channel = channel
    }

    /// Starts a server on a Unix domain socket (an existing socket file at `path` is replaced).
    ///
    /// - Parameter path: The socket file's path.
    /// - Returns: The running server.
    /// - Throws: When the socket cannot be bound.
    public static func start(unixSocketPath path: String) async throws -> BrickTestServer {
        let (group, state, bootstrap) = makeBootstrap(tcp: false)
        do {
            let channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
            return BrickTestServer(port: 0, unixSocketPath: path, state: state, group: group, channel: channel)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    /// Starts a server on `127.0.0.1` and an ephemeral port.
    ///
    /// - Parameter port: The port, or 0 to let the kernel choose one.
    /// - Returns: The running server.
    /// - Throws: When the socket cannot be bound.
    public static func start(port: Int = 0) throws -> BrickTestServer {
        let (group, state, bootstrap) = makeBootstrap()
        do {
            let channel = try bootstrap.bind(host: "127.0.0.1", port: port).wait()
            return BrickTestServer(port: channel.localAddress?.port ?? 0, state: state, group: group, channel: channel)
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    /// Starts a server on `127.0.0.1` (or another loopback address: `127.0.0.2` plays a public
    /// host in egress tests) without blocking a thread of the caller's executor.
    ///
    /// - Parameters:
    ///   - port: The port, or 0 to let the kernel choose one.
    ///   - address: The address to listen on. Default `127.0.0.1`.
    /// - Returns: The running server.
    /// - Throws: When the socket cannot be bound.
    public static func start(port: Int = 0, address: String = "127.0.0.1") async throws -> BrickTestServer {
        let (group, state, bootstrap) = makeBootstrap()
        do {
            let channel = try await bootstrap.bind(host: address, port: port).get()
            return BrickTestServer(port: channel.localAddress?.port ?? 0, state: state, group: group, channel: channel)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    private static func makeBootstrap(tcp: Bool = true) -> (MultiThreadedEventLoopGroup, ServerState, ServerBootstrap) {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let state = ServerState()
        var bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 1024)
        if tcp {
            bootstrap = bootstrap.serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
        }
        bootstrap =
            bootstrap
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let connection = state.connectionOpened()
                    try channel.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes))
                    )
                    try channel.pipeline.syncOperations.addHandler(
                        ConnectionHandler(state: state, connection: connection)
                    )
                }
            }
        return (group, state, bootstrap)
    }

    /// Stops listening, closes every connection and stops the server's thread, without blocking.
    public func shutdown() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }

    /// Stops listening, closes every connection and stops the server's thread.
    public func shutdown() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }

    /// Queues scripted answers for requests to `path` (the path without its query).
    ///
    /// - Parameters:
    ///   - path: The exact path, e.g. `/orders`.
    ///   - steps: One step per request, in order; after the last, the normal route answers.
    public func script(_ path: String, _ steps: [ScriptedResponse]) {
        state.script(path, steps)
    }

    /// Answers every request to `path` with `handler` (after any scripted steps for that path), in
    /// place of the built-in route: a fixture API for demos and users' own tests.
    ///
    /// - Parameters:
    ///   - path: The exact path, e.g. `/users`.
    ///   - handler: Builds the answer from the received request.
    public func route(_ path: String, _ handler: @escaping @Sendable (RecordedRequest) -> ScriptedResponse) {
        state.route(path, handler)
    }

    /// Every request received so far, in arrival order.
    public var requests: [RecordedRequest] { state.snapshot.requests }

    /// The requests received for one path.
    ///
    /// - Parameter path: The path without its query.
    /// - Returns: Those requests, in arrival order.
    public func requests(path: String) -> [RecordedRequest] {
        requests.filter { $0.path == path }
    }

    /// How many TCP connections the server has accepted.
    public var connectionCount: Int { state.snapshot.connections }

    /// How many requests the server has read (including ones it then faulted).
    public var requestCount: Int { state.snapshot.requests.count }

    /// How many connections are open right now.
    public var openConnectionCount: Int { state.snapshot.openConnections }

    /// How many ``ScriptedResponse/pushAfterResponse(_:bytes:delay:)`` pushes have been written.
    public var pushCount: Int { state.snapshot.pushes }

    /// How many `304 Not Modified` answers the `/cache/…` route has sent.
    public var notModifiedCount: Int { state.snapshot.notModified }

    /// Makes a new version of a `/cache/…` resource: a new body, `ETag` and `Last-Modified`, so
    /// that a revalidation gets a `200` with the new body.
    ///
    /// - Parameter path: The resource's path, e.g. `/cache/profile`.
    public func changeResource(_ path: String) {
        state.changeResource(path)
    }

    /// Forgets recorded requests and counters (scripts stay).
    public func resetRecords() {
        state.resetRecords()
    }
}

/// Counters, recorded requests and scripts, shared by every connection.
final class ServerState: Sendable {
    struct Snapshot {
        var connections = 0
        var openConnections = 0
        var pushes = 0
        var notModified = 0
        /// Versions of `/cache/…` resources (1 when absent) and how often each was served whole.
        var resourceVersions: [String: Int] = [:]
        var served: [String: Int] = [:]
        var requests: [RecordedRequest] = []
        var scripts: [String: [ScriptedResponse]] = [:]
        var routes: [String: @Sendable (RecordedRequest) -> ScriptedResponse] = [:]
    }

    private let storage = Mutex(Snapshot())

    var snapshot: Snapshot { storage.withLock { $0 } }

    func connectionOpened() -> Int {
        storage.withLock {
            $0.connections += 1
            $0.openConnections += 1
            return $0.connections
        }
    }

    func connectionClosed() {
        storage.withLock { $0.openConnections -= 1 }
    }

    func pushWritten() {
        storage.withLock { $0.pushes += 1 }
    }

    func changeResource(_ path: String) {
        storage.withLock { $0.resourceVersions[path, default: 1] += 1 }
    }

    /// The current version of a `/cache/…` resource, and the number of whole answers for it once
    /// this one counts (`nil`: a `304`, counted as such).
    func cacheResource(_ path: String, notModified: (Int) -> Bool) -> (version: Int, served: Int?) {
        storage.withLock { state in
            let version = state.resourceVersions[path] ?? 1
            if notModified(version) {
                state.notModified += 1
                return (version, nil)
            }
            state.served[path, default: 0] += 1
            return (version, state.served[path]!)
        }
    }

    func script(_ path: String, _ steps: [ScriptedResponse]) {
        storage.withLock { $0.scripts[path, default: []].append(contentsOf: steps) }
    }

    func route(_ path: String, _ handler: @escaping @Sendable (RecordedRequest) -> ScriptedResponse) {
        storage.withLock { $0.routes[path] = handler }
    }

    func resetRecords() {
        storage.withLock {
            $0.connections = 0
            $0.requests = []
            $0.notModified = 0
        }
    }

    /// Records a request and takes the next scripted step for its path, or its custom route, if any.
    func received(_ request: RecordedRequest) -> ScriptedResponse? {
        let (step, route) = storage.withLock {
            state -> (ScriptedResponse?, (@Sendable (RecordedRequest) -> ScriptedResponse)?) in
            state.requests.append(request)
            guard var steps = state.scripts[request.path], !steps.isEmpty else {
                return (nil, state.routes[request.path])
            }
            let step = steps.removeFirst()
            state.scripts[request.path] = steps.isEmpty ? nil : steps
            return (step, nil)
        }
        return step ?? route?(request)
    }
}
