import BrickOfflineCore
import Foundation
import GRDB

/// What the offline store and the response cache do alike with their SQLite files.
enum SQLiteFiles {
    /// Creates `path` with mode 0600 when it is missing, before SQLite opens it: SQLite gives its
    /// `-wal` and `-shm` files the same mode.
    static func createPrivate(_ path: String) {
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
    }

    /// Runs `body` holding an exclusive `flock` on `lockPath` (created mode 0600 when missing):
    /// the openers of one shared file — threads of this process and other processes alike, each
    /// with a descriptor of its own — take turns. A process that dies while holding it releases it.
    ///
    /// The lock is a file of its own, never the database: closing any descriptor of the database
    /// would drop the POSIX locks SQLite holds on it in this process.
    static func whileLocked<T>(_ lockPath: String, _ body: () throws -> T) throws -> T {
        let descriptor = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw DatabaseError(resultCode: .SQLITE_CANTOPEN, message: "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        while flock(descriptor, LOCK_EX) != 0 {
            guard errno == EINTR else {
                throw DatabaseError(resultCode: .SQLITE_IOERR, message: "cannot lock \(lockPath): \(String(cString: strerror(errno)))")
            }
        }
        return try body()
    }

    /// Opens `path` (creating it) and holds a shared `flock` on it for as long as the descriptor
    /// stays open: every opener of a database holds one while it uses the file, so that no other
    /// opener takes a file in use for a damaged one and moves it aside (``isSoleUser(_:)``).
    /// -1 when the file cannot be opened (nothing is then held, and nothing is known of others).
    static func holdShared(_ path: String) -> Int32 {
        let descriptor = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return -1 }
        while flock(descriptor, LOCK_SH) != 0 && errno == EINTR {}
        return descriptor
    }

    /// Whether no other opener holds a shared lock like `descriptor`'s (``holdShared(_:)``): its
    /// lock turned exclusive without waiting, then shared again. `true` for -1.
    static func isSoleUser(_ descriptor: Int32) -> Bool {
        guard descriptor >= 0 else { return true }
        let sole = flock(descriptor, LOCK_EX | LOCK_NB) == 0
        // A failed conversion may have dropped the shared lock (flock converts by unlocking first).
        while flock(descriptor, LOCK_SH) != 0 && errno == EINTR {}
        return sole
    }

    /// Throws `SQLITE_CORRUPT` unless SQLite's `quick_check` passes.
    static func quickCheck(_ db: Database) throws {
        let check = try String.fetchOne(db, sql: "PRAGMA quick_check") ?? "ok"
        if check != "ok" {
            throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "quick_check: \(check)")
        }
    }

    /// Moves a damaged database and its `-wal` and `-shm` files aside, to
    /// `PATH.corrupt-MILLISECONDS` (never deleted); returns the new name of the database.
    ///
    /// - Parameters:
    ///   - path: The database file.
    ///   - failure: The error to throw, given the system's reason, when a file cannot be moved.
    static func moveAside(_ path: String, failure: (String) -> any Error) throws -> String {
        let target = "\(path).corrupt-\(Int(Date().timeIntervalSince1970 * 1000))"
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            guard rename(path + suffix, target + suffix) == 0 else {
                throw failure(String(cString: strerror(errno)))
            }
        }
        return target
    }
}
