// brick-queue: the operator's command line over a SQLite store file (BrickOffline's
// `SQLiteOfflineStore`). It builds GRDB and never postgres-nio: a fleet on PostgreSQL has
// `brick-queue-postgres`, the same commands over its database.
//
//   brick-queue --sqlite /var/lib/app/offline.sqlite status
//   brick-queue --sqlite /var/lib/app/offline.sqlite retry --dead webhooks --all --dry-run
import BrickOfflineCore
import BrickOfflineSQLite
import BrickQueueCommands
import Foundation

/// Opens SQLite store files for inspection; refuses PostgreSQL, naming the tool that reads it.
struct SQLiteStoreOpener: StoreOpener {
    var toolName: String { "brick-queue" }
    var storesHelp: String { "The store is a SQLite file (--sqlite PATH, a NAME.sqlite store); PostgreSQL stores: brick-queue-postgres." }

    func withStore<T: Sendable>(
        _ location: StoreLocation, changing: Bool, _ body: (any InspectableOfflineStore) async throws -> T
    ) async throws -> T {
        guard case .sqlite(let path) = location else {
            throw Refusal(
                "this brick-queue reads SQLite store files: give --sqlite PATH. A PostgreSQL store is read by brick-queue-postgres (swift build --product brick-queue-postgres: the same commands, built with postgres-nio)"
            )
        }
        let store = try Self.sqliteStore(path, access: changing ? .change : .read)
        return try await body(store)
    }

    func mayChange(_ location: StoreLocation) -> Bool {
        guard case .sqlite(let path) = location else { return false }
        return (try? Self.sqliteStore(path, access: .change)) != nil
    }

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

await BrickQueueTool.run(opener: SQLiteStoreOpener())
