// brick-queue: the operator's command line over a SQLite store file (BrickOffline's
// `SQLiteOfflineStore`). It builds GRDB and never postgres-nio: a fleet on PostgreSQL has
// `brick-queue-postgres`, the same commands over its database. Given a PostgreSQL store
// (`--postgres URL`, or no `--sqlite`), it hands over to `brick-queue-postgres` when that tool was
// built beside it (a whole `swift build` of this package), so `brick-queue --postgres …` works as
// it always did; otherwise it says how to build it.
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
            Self.handOverToPostgresTool()
            throw Refusal(
                "this brick-queue reads SQLite store files: give --sqlite PATH. A PostgreSQL store is read by brick-queue-postgres (swift build --product brick-queue-postgres: the same commands, built with postgres-nio)"
            )
        }
        let store = try Self.sqliteStore(path, access: changing ? .change : .read)
        return try await body(store)
    }

    /// Runs `brick-queue-postgres` from this executable's directory in this process's place, with
    /// the same arguments, when it is there; returns when it is not.
    static func handOverToPostgresTool() {
        guard let own = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return }
        let sibling = URL(fileURLWithPath: own).deletingLastPathComponent().appendingPathComponent("brick-queue-postgres").path
        guard FileManager.default.isExecutableFile(atPath: sibling) else { return }
        let arguments = [sibling] + CommandLine.arguments.dropFirst()
        var pointers = arguments.map { strdup($0) } + [nil]
        execv(sibling, &pointers)
        // execv returned: it failed; the refusal that follows says what to do.
        for pointer in pointers { free(pointer) }
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
