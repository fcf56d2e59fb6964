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
            environment). On a SQLite store, reads (status, list, show, serve's pages) work beside a \
            running worker; changes (retry, remove, purge, pause, resume) need its worker stopped, or \
            go through the console mounted in the worker. The file is never migrated, repaired or \
            moved. PostgreSQL is shared: run every command beside the fleet. Entries under a worker's lease are shown as leased and \
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
    ///
    /// A SQLite file is opened as an inspection, never as a worker opens it: nothing is migrated,
    /// recovered, moved aside or repaired, whatever state it is in. Reads (`changing: false`) take
    /// no lock and work beside a running worker; changes need the store's lock (its worker
    /// stopped).
    func withStore<T: Sendable>(changing: Bool = false, _ body: (any InspectableOfflineStore) async throws -> T) async throws -> T {
        if let sqlitePath {
            let store = try Self.sqliteStore(sqlitePath, access: changing ? .change : .read)
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

extension BrickQueue {
    /// The SQLite store at `path`, opened for inspection (``SQLiteOfflineStore/inspecting(atPath:access:)``).
    static func sqliteStore(_ path: String, access: SQLiteOfflineStore.InspectionAccess) throws -> SQLiteOfflineStore {
        let url = URL(fileURLWithPath: path)
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw Refusal("no store at \(path) (a SQLite store is a NAME.sqlite file)")
        }
        guard url.pathExtension == "sqlite" else {
            throw Refusal("\(path) is not a store file: a SQLite store is named NAME.sqlite")
        }
        // A file of an older release is not migrated: its workers would then refuse it.
        let applied: Set<String>
        do {
            applied = try SQLiteOfflineStore.appliedMigrations(atPath: url.path)
        } catch {
            throw Refusal("\(error)")
        }
        if applied.isEmpty { throw Refusal("\(path) is not an offline store (it has no store tables)") }
        if let missing = SQLiteOfflineStore.migrationIdentifiers.first(where: { !applied.contains($0) }) {
            throw Refusal(
                "the store was written by an older release (it lacks migration \"\(missing)\"): use the brick-queue of the workers' release, or open it once with a worker of this release"
            )
        }
        do {
            return try SQLiteOfflineStore.inspecting(atPath: url.path, access: access)
        } catch let error as OfflineStoreError where error.kind == .corrupt {
            throw Refusal(
                "\(path) is damaged (\(error.message)); it was left as it is. Copy it aside before anything else: its worker, when it next opens the store, moves it aside and carries every readable entry into a new one (sqlite3's .recover reads what is left by hand)"
            )
        } catch {
            throw Refusal("cannot open \(path): \(error)")
        }
    }
}

/// A refusal: exit status 1, with a message that says what to do.
struct Refusal: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
