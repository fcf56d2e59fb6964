// brick-queue: what an operator needs at 3 a.m. — how deep each queue is, what is stuck and why,
// what died and why, and putting dead letters back. The commands, shared by the two tools:
//
//   brick-queue --sqlite /var/lib/app/offline.sqlite status       (SQLite store files)
//   brick-queue-postgres list webhooks --dead                      (PostgreSQL: PG* / DATABASE_URL)
//   brick-queue-postgres --postgres postgres://… retry --dead webhooks --all --older-than 1h
//
// Two executables over one set of commands, so that a service on one store builds only that
// store's client: `brick-queue` builds GRDB and never postgres-nio (nor its two BoringSSLs);
// `brick-queue-postgres` builds postgres-nio and never GRDB. Each is a `StoreOpener` handed to
// ``BrickQueueTool/run(opener:)``.
//
// Exit status: 0 done; 1 not found or refused (the message says what to do); 2 a usage error.
import ArgumentParser
import BrickOfflineCore
import BrickRequest
import Foundation

/// Where the options say the store is.
package enum StoreLocation: Sendable {
    /// `--sqlite PATH`.
    case sqlite(path: String)
    /// `--postgres URL` (nil: DATABASE_URL or the PG* variables) and `--schema`.
    case postgres(url: String?, schema: String)
}

/// How one tool opens the stores it was built for: the SQLite one in `brick-queue`, the PostgreSQL
/// one in `brick-queue-postgres`.
package protocol StoreOpener: Sendable {
    /// The tool's name, as the operator types it.
    var toolName: String { get }
    /// One line for the help: which stores this tool reads and how they are named.
    var storesHelp: String { get }
    /// Opens the store at `location`, runs `body` on it and closes it; a ``Refusal`` when this tool
    /// was not built for that kind of store (the message names the tool that is), or it cannot open.
    /// `changing`: the store will be changed (on SQLite, that needs its worker stopped).
    func withStore<T: Sendable>(
        _ location: StoreLocation, changing: Bool, _ body: (any InspectableOfflineStore) async throws -> T
    ) async throws -> T
    /// Whether the store at `location` can be changed now (false: a SQLite store whose worker runs;
    /// the console then serves read-only pages).
    func mayChange(_ location: StoreLocation) -> Bool
}

/// The tool the process runs as (set by ``BrickQueueTool/run(opener:)`` around parsing and running).
enum Tool {
    @TaskLocal static var opener: (any StoreOpener)?
}

/// The root command of both tools.
struct BrickQueue: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        let opener = Tool.opener
        return CommandConfiguration(
            commandName: opener?.toolName ?? "brick-queue",
            abstract: "Inspect BrickRequest's offline queues and put dead letters back.",
            discussion: """
                \(opener?.storesHelp ?? "") On a SQLite store, reads (status, list, show, serve's \
                pages) work beside a running worker; changes (retry, remove, purge, pause, resume) \
                need its worker stopped, or go through the console mounted in the worker. The file is \
                never migrated, repaired or moved. PostgreSQL is shared: run every command beside the \
                fleet. Entries under a worker's lease are shown as leased and never changed.

                Exit status: 0 done; 1 not found or refused; 2 a usage error.
                """,
            subcommands: [Status.self, List.self, Show.self, Retry.self, Remove.self, Purge.self, Pause.self, Resume.self, Serve.self]
        )
    }

    @Option(name: .customLong("sqlite"), help: ArgumentHelp("A SQLite store file (brick-queue).", valueName: "path"))
    var sqlitePath: String?

    @Option(name: .customLong("postgres"), help: ArgumentHelp("A PostgreSQL URL (brick-queue-postgres).", valueName: "url"))
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

    /// The store the options name.
    var location: StoreLocation {
        sqlitePath.map { .sqlite(path: $0) } ?? .postgres(url: postgresURL, schema: schema)
    }

    /// Opens the store the options name, runs `body` on it, and closes it (through the tool's
    /// ``StoreOpener``).
    ///
    /// A SQLite file is opened as an inspection, never as a worker opens it: nothing is migrated,
    /// recovered, moved aside or repaired, whatever state it is in. Reads (`changing: false`) take
    /// no lock and work beside a running worker; changes need the store's lock (its worker
    /// stopped).
    func withStore<T: Sendable>(changing: Bool = false, _ body: (any InspectableOfflineStore) async throws -> T) async throws -> T {
        guard let opener = Tool.opener else { throw Refusal("no store opener (run through BrickQueueTool.run(opener:))") }
        return try await opener.withStore(location, changing: changing, body)
    }
}

/// What the two executables run.
package enum BrickQueueTool {
    /// Parses the process's arguments and runs the command with `opener` opening stores; exits with
    /// status 1 for a refusal, 2 for a usage error.
    package static func run(opener: some StoreOpener) async -> Never {
        let status: Int32 = await Tool.$opener.withValue(opener) {
            do {
                var command = try BrickQueue.parseAsRoot()
                if var command = command as? any AsyncParsableCommand {
                    try await command.run()
                } else {
                    try command.run()
                }
                return 0
            } catch let refusal as Refusal {
                FileHandle.standardError.write(Data("\(opener.toolName): \(refusal.message)\n".utf8))
                return 1
            } catch {
                let code = BrickQueue.exitCode(for: error)
                if code == .success {
                    print(BrickQueue.fullMessage(for: error))
                    return 0
                }
                FileHandle.standardError.write(Data("\(BrickQueue.fullMessage(for: error))\n".utf8))
                return code == .validationFailure || code.rawValue == 64 ? 2 : 1
            }
        }
        Foundation.exit(status)
    }
}

/// A refusal: exit status 1, with a message that says what to do.
package struct Refusal: Error {
    package let message: String
    package init(_ message: String) { self.message = message }
}
