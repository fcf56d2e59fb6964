import BrickOffline
import BrickOfflinePostgres
import BrickTestSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// A private PostgreSQL server for the test process: `Scripts/private-postgres.sh` makes a cluster
/// in a temporary directory (initdb, an unprivileged user, a free port on 127.0.0.1), started once;
/// its watchdog stops it and removes the directory when this process ends, however it ends. Each
/// test works in a schema of its own.
package final class PostgresFixture: Sendable {
    package let directory: String
    package let host = "127.0.0.1"
    package let port: Int
    package let user = "brick"
    package let password: String
    package let database = "brick"

    package struct FixtureError: Error, CustomStringConvertible {
        package var message: String
        package var description: String { message }
    }

    /// The shared server's start, begun by the first test that asks. It runs on a thread of its
    /// own (initdb and pg_ctl take seconds, a minute on a loaded machine): a lazily made static
    /// started on a cooperative-pool thread blocked that thread for the whole start, and every
    /// other test asking for it blocked another one in the static's lock — with two pool threads,
    /// the whole pool stalled for as long as PostgreSQL took to start.
    private static let shared = Mutex<Task<PostgresFixture, any Error>?>(nil)

    /// The shared server once a test has awaited ``server()``.
    private static let started = Mutex<PostgresFixture?>(nil)

    /// The shared server, already started (by an earlier ``server()`` in the same test); an error
    /// otherwise. For code that cannot wait.
    package static func running() throws -> PostgresFixture {
        guard let server = started.withLock({ $0 }) else {
            throw FixtureError(message: "the shared PostgreSQL is not started yet: await PostgresFixture.server() first")
        }
        return server
    }

    /// A server of its own, for a test that restarts it (the shared one serves tests running in
    /// parallel); ``stop()`` it at the end (its watchdog stops it anyway when this process ends).
    package static func startPrivate() async throws -> PostgresFixture {
        try await Subprocess.offPool { try PostgresFixture() }
    }

    /// Stops the server and removes its directory.
    package func stop() {
        _ = try? Self.run(Self.script, ["stop", directory])
    }

    /// The shared server, or a test failure that says why there is none. Waiting for its start
    /// holds no thread.
    package static func server() async throws -> PostgresFixture {
        PoolWatchdog.start()
        let start = shared.withLock { start in
            if let start { return start }
            let made = Task { try await Subprocess.offPool { try PostgresFixture() } }
            start = made
            return made
        }
        do {
            let server = try await start.value
            started.withLock { $0 = server }
            return server
        } catch {
            throw error as? FixtureError ?? FixtureError(message: "\(error)")
        }
    }

    package static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Scripts/private-postgres.sh").path
    }

    private init() throws {
        directory = NSTemporaryDirectory() + "brick-postgres-" + UUID().uuidString
        let output = try Self.run(Self.script, ["start", directory, "\(getpid())"])
        guard output.status == 0 else {
            throw FixtureError(
                message: "cannot start a private PostgreSQL (install Debian's postgresql package): \(output.text)"
            )
        }
        var variables: [String: String] = [:]
        for word in output.text.split(whereSeparator: { $0 == " " || $0 == "\n" }) where word.contains("=") {
            let parts = word.split(separator: "=", maxSplits: 1)
            variables[String(parts[0])] = String(parts[1])
        }
        guard let port = variables["PGPORT"].flatMap(Int.init), let password = variables["PGPASSWORD"] else {
            throw FixtureError(message: "private-postgres.sh printed no port: \(output.text)")
        }
        self.port = port
        self.password = password
    }

    /// The variables `libpq` (and ``PostgresOfflineStore/clientConfiguration(environment:)``) read.
    package var environment: [String: String] {
        ["PGHOST": host, "PGPORT": "\(port)", "PGUSER": user, "PGPASSWORD": password, "PGDATABASE": database]
    }

    /// A client configuration for the server, with a small pool; `port` to reach it through
    /// another port (a proxy's).
    package func configuration(connections: Int = 8, port: Int? = nil) -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(
            host: host, port: port ?? self.port, username: user, password: password, database: database, tls: .disable
        )
        configuration.options.maximumConnections = connections
        return configuration
    }

    /// `pg_ctl restart` of the server (same port, same data), on a thread of its own.
    package func restart() async throws {
        let directory = self.directory
        let output = try await Subprocess.offPool { try Self.run(Self.script, ["restart", directory]) }
        guard output.status == 0 else { throw FixtureError(message: "restart failed: \(output.text)") }
    }

    /// The start-up deadline of the tests' stores: in a whole-suite run (or a fresh-clone CI run)
    /// dozens of tests open stores at once on two loaded cores, each migrating a schema of its own,
    /// which can take longer than the default 10 s. Tests of the deadline itself pass their own.
    package static let startupDeadline: Duration = .seconds(120)

    /// A schema name no other test uses.
    package static func freshSchema() -> String {
        "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
    }

    package static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, text: String) {
        // Subprocess (posix_spawn and waitpid): Foundation's Process waits on a run loop that a
        // test process's blocked threads may never turn.
        let command = ([executable] + arguments).map { "'\($0)'" }.joined(separator: " ")
        do {
            return (0, try Subprocess.runBlocking(command + " 2>&1"))
        } catch {
            return (1, "\(error)")
        }
    }
}

/// A running `PostgresClient`, stopped by `shutdown()`.
package final class RunningClient: Sendable {
    package let client: PostgresClient
    private let task: Task<Void, Never>

    package init(_ configuration: PostgresClient.Configuration, backgroundLogger: Logger? = nil) {
        let client =
            backgroundLogger.map { PostgresClient(configuration: configuration, backgroundLogger: $0) }
            ?? PostgresClient(configuration: configuration)
        self.client = client
        self.task = Task { await client.run() }
    }

    package func shutdown() {
        task.cancel()
    }
}
