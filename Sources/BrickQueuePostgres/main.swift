// brick-queue-postgres: the operator's command line over a fleet's PostgreSQL store
// (BrickOfflinePostgres' `PostgresOfflineStore`), the same commands as brick-queue. It builds
// postgres-nio and never GRDB: a service on SQLite has `brick-queue`.
//
//   brick-queue-postgres status                     (DATABASE_URL or PG* from the environment)
//   brick-queue-postgres --postgres postgres://… list webhooks --dead
import BrickOfflineCore
import BrickOfflinePostgres
import BrickQueueCommands
import Logging
import PostgresNIO

/// Opens a PostgreSQL store beside the fleet; refuses SQLite files, naming the tool that reads them.
struct PostgresStoreOpener: StoreOpener {
    var toolName: String { "brick-queue-postgres" }
    var storesHelp: String {
        "The store is a PostgreSQL database (--postgres URL; by default DATABASE_URL or PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE from the environment) and --schema; SQLite store files: brick-queue."
    }

    func mayChange(_ location: StoreLocation) -> Bool {
        if case .postgres = location { return true }
        return false
    }

    func withStore<T: Sendable>(
        _ location: StoreLocation, changing: Bool, _ body: (any InspectableOfflineStore) async throws -> T
    ) async throws -> T {
        guard case .postgres(let postgresURL, let schema) = location else {
            throw Refusal(
                "this brick-queue-postgres reads PostgreSQL stores: give --postgres URL (or DATABASE_URL). A SQLite store file is read by brick-queue (swift build --product brick-queue)"
            )
        }
        var logger = Logger(label: "brick-queue-postgres")
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
                    "the store in \(schema) is at schema version \(version), this tool's release at \(PostgresSchema.currentVersion): use the brick-queue-postgres of the workers' release (a newer one would migrate the store, and the workers would refuse to restart)"
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

await BrickQueueTool.run(opener: PostgresStoreOpener())
