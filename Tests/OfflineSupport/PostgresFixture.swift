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

    package static let shared: Result<PostgresFixture, FixtureError> = Result { try PostgresFixture() }.mapError {
        $0 as? FixtureError ?? FixtureError(message: "\($0)")
    }

    /// A server of its own, for a test that restarts it (the shared one serves tests running in
    /// parallel); ``stop()`` it at the end (its watchdog stops it anyway when this process ends).
    package static func startPrivate() throws -> PostgresFixture {
        try PostgresFixture()
    }

    /// Stops the server and removes its directory.
    package func stop() {
        _ = try? Self.run(Self.script, ["stop", directory])
    }

    /// The shared server, or a test failure that says why there is none.
    package static func server() throws -> PostgresFixture {
        try shared.get()
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

    /// `pg_ctl restart` of the server (same port, same data).
    package func restart() throws {
        let output = try Self.run(Self.script, ["restart", directory])
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
