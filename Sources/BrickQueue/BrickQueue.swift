// brick-queue: what an operator needs at 3 a.m. — how deep each queue is, what is stuck and why,
// what died and why, and putting dead letters back — on a SQLite store file or on PostgreSQL.
//
//   brick-queue --sqlite /var/lib/app/offline.sqlite status
//   brick-queue --postgres postgres://… list webhooks --dead
//   brick-queue show 6F1C…           (PG* / DATABASE_URL from the environment by default)
//   brick-queue retry --dead webhooks --all --older-than 1h
//
// Exit status: 0 done; 1 not found or refused (the message says what to do); 2 a usage error.
import ArgumentParser
import BrickOfflineCore
import BrickOfflinePostgres
import BrickOfflineSQLite
import BrickRequest
import Foundation
import Logging
import PostgresNIO

@main
struct BrickQueue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "brick-queue",
        abstract: "Inspect BrickRequest's offline queues and put dead letters back, on SQLite or PostgreSQL.",
        discussion: """
            The store is a SQLite file (--sqlite PATH) or a PostgreSQL database (--postgres URL; by \
            default DATABASE_URL or PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE from the \
            environment). A SQLite store belongs to one process: stop its worker first. PostgreSQL is \
            shared: run it beside the fleet. Entries under a worker's lease are shown as leased and \
            never changed.

            Exit status: 0 done; 1 not found or refused; 2 a usage error.
            """,
        subcommands: [Status.self, List.self, Show.self, Retry.self, Remove.self, Purge.self, Pause.self, Resume.self, Serve.self]
    )

    @Option(name: .customLong("sqlite"), help: ArgumentHelp("A SQLite store file.", valueName: "path"))
    var sqlitePath: String?

    @Option(name: .customLong("postgres"), help: ArgumentHelp("A PostgreSQL URL.", valueName: "url"))
    var postgresURL: String?

    @Option(help: "The PostgreSQL schema the store lives in.")
    var schema = "brick_offline"

    @Flag(help: "JSON output: one object per line, with stable field names.")
    var json = false

    func validate() throws {
        if sqlitePath != nil && postgresURL != nil {
            throw ValidationError("give --sqlite or --postgres, not both")
        }
    }

    /// Runs the command; exit status 1 for a refusal, 2 for a usage error.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch let refusal as Refusal {
            FileHandle.standardError.write(Data("brick-queue: \(refusal.message)\n".utf8))
            Foundation.exit(1)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                Foundation.exit(0)
            }
            FileHandle.standardError.write(Data("\(fullMessage(for: error))\n".utf8))
            Foundation.exit(code == .validationFailure ? 2 : code.rawValue == 64 ? 2 : 1)
        }
    }

    /// Opens the store the options name, runs `body` on it, and closes it.
    func withStore<T: Sendable>(_ body: (any InspectableOfflineStore) async throws -> T) async throws -> T {
        if let sqlitePath {
            let url = URL(fileURLWithPath: sqlitePath)
            guard FileManager.default.fileExists(atPath: url.path) else {
                throw Refusal("no store at \(sqlitePath) (a SQLite store is a NAME.sqlite file)")
            }
            guard url.pathExtension == "sqlite" else {
                throw Refusal("\(sqlitePath) is not a store file: a SQLite store is named NAME.sqlite")
            }
            // Opening migrates: a file of an older release would then refuse that release's workers.
            let applied: Set<String>
            do {
                applied = try SQLiteOfflineStore.appliedMigrations(atPath: url.path)
            } catch {
                throw Refusal("\(error)")
            }
            if applied.isEmpty { throw Refusal("\(sqlitePath) is not an offline store (it has no store tables)") }
            if let missing = SQLiteOfflineStore.migrationIdentifiers.first(where: { !applied.contains($0) }) {
                throw Refusal(
                    "the store was written by an older release (it lacks migration \"\(missing)\"): use the brick-queue of the workers' release, or open it once with a worker of this release"
                )
            }
            let store: SQLiteOfflineStore
            do {
                store = try await SQLiteOfflineStore.open(
                    name: url.deletingPathExtension().lastPathComponent,
                    directory: url.deletingLastPathComponent()
                )
            } catch {
                throw Refusal("cannot open \(sqlitePath): \(error) — is its worker still running? A SQLite store belongs to one process")
            }
            return try await body(store)
        }
        var logger = Logger(label: "brick-queue")
        logger.logLevel = .error
        let configuration: PostgresClient.Configuration
        do {
            configuration = try postgresURL.map { try PostgresOfflineStore.clientConfiguration(url: $0) }
                ?? PostgresOfflineStore.clientConfiguration()
        } catch {
            throw Refusal("\(error)")
        }
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            // An operator's tool reads a store; it never creates one where none is (a mistyped schema),
            // nor migrates one of an older release (its workers would then refuse to start).
            let found: Int?
            do {
                found = try await PostgresSchema.version(client: client, schema: schema, limit: .seconds(15), logger: logger)
            } catch {
                throw Refusal("\(error)")
            }
            guard let version = found else {
                throw Refusal("no offline store in schema \(schema) of that database: is --schema right?")
            }
            guard version >= PostgresSchema.currentVersion else {
                throw Refusal(
                    "the store in \(schema) is at schema version \(version), this brick-queue's release at \(PostgresSchema.currentVersion): use the brick-queue of the workers' release (a newer one would migrate the store, and the workers would refuse to restart)"
                )
            }
            let store: PostgresOfflineStore
            do {
                store = try await PostgresOfflineStore(
                    client: client, schema: schema, wakeUps: .pollOnly(), logger: logger,
                    startupDeadline: .seconds(15)
                )
            } catch {
                throw Refusal("\(error)")
            }
            return try await body(store)
        }
    }
}

/// A refusal: exit status 1, with a message that says what to do.
struct Refusal: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
