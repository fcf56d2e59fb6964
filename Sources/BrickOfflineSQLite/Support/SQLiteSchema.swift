import BrickOfflineCore
import GRDB

/// The migrations of a SQLite file, applied as one write transaction taken at once
/// (`BEGIN IMMEDIATE`): the check for what is applied and the applying are one step, so several
/// openers of a new file (threads, processes) take turns on SQLite's write lock — the first
/// creates the tables, the others find them — instead of racing to create them ("table … already
/// exists"). Applied migrations are recorded in `grdb_migrations`, as GRDB's `DatabaseMigrator`
/// does, so files made by earlier versions open unchanged.
struct SQLiteSchema: Sendable {
    /// One migration: its identifier (never changed once released) and its statements.
    struct Migration: Sendable {
        var identifier: String
        var apply: @Sendable (Database) throws -> Void
    }

    /// In order.
    let migrations: [Migration]

    /// Applies what `pool`'s file lacks; waits for another opener's transaction up to the pool's
    /// busy timeout.
    ///
    /// - Throws: GRDB's `DatabaseError` (the file is damaged, the disk is full, the lock was held
    ///   past the busy timeout), or the error of a migration identifier this build does not know
    ///   (a file written by a newer version).
    func apply(to pool: DatabasePool) throws {
        try pool.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
                let applied = Set(try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
                let known = Set(migrations.map(\.identifier))
                if let unknown = applied.subtracting(known).sorted().first {
                    throw DatabaseError(
                        resultCode: .SQLITE_ERROR,
                        message: "the file was migrated by a newer version (migration \(unknown.debugDescription))"
                    )
                }
                for migration in migrations where !applied.contains(migration.identifier) {
                    try migration.apply(db)
                    try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES (?)", arguments: [migration.identifier])
                }
                return .commit
            }
        }
    }
}
