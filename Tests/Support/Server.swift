import BrickTestServer

/// Starts a loopback server, lets `prepare` add routes, and runs `body` with it; the server is shut
/// down however `body` ends.
package func withServer<T>(
    prepare: (BrickTestServer) -> Void = { _ in },
    _ body: (BrickTestServer) async throws -> T
) async throws -> T {
    PoolWatchdog.start()
    let server = try await BrickTestServer.start()
    prepare(server)
    do {
        let result = try await body(server)
        await server.shutdown()
        return result
    } catch {
        await server.shutdown()
        throw error
    }
}
