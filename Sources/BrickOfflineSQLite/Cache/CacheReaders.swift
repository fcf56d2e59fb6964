import BrickRequest
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The cache's read connections: a hit is one step of a statement prepared once, on a read-only
/// connection kept open, through SQLite's C API.
///
/// Through GRDB, every read took a reader from its pool, ran on that reader's serial queue inside
/// a `BEGIN`/`COMMIT`, and copied every column of the row into a `Row` looked up by name: 38 µs
/// against 7 µs for the same point read in C (cache-bench, 2026-11-28). A single `SELECT` in
/// autocommit mode reads one snapshot as the transaction did, and WAL mode lets it run beside the
/// writer. A connection is used by one caller at a time: taken from the idle list and given back;
/// a caller that finds none idle opens one (callers at once are bounded by the threads reading,
/// and at most ``keptIdle`` stay open after).
final class CacheReaders: Sendable {
    /// The columns a hit reads, in the order of ``Connection/hitSQL``.
    enum Column: Int32 {
        case id, variant, status, headers, body, bodyFile, bodyDigest, bodySize, url, requestTime, responseTime

        /// The column's name, for what a damaged row reports.
        var name: String {
            switch self {
            case .id: "id"
            case .variant: "variant"
            case .status: "status"
            case .headers: "headers"
            case .body: "body"
            case .bodyFile: "bodyFile"
            case .bodyDigest: "bodyDigest"
            case .bodySize: "bodySize"
            case .url: "url"
            case .requestTime: "requestTime"
            case .responseTime: "responseTime"
            }
        }
    }

    /// One read-only connection and its prepared statement.
    final class Connection: @unchecked Sendable {  // one thread at a time: `withConnection` holds it, `idle`'s lock guards it otherwise
        static let hitSQL = """
            SELECT id, variant, status, headers, body, bodyFile, bodyDigest, bodySize, url, requestTime, responseTime
            FROM response WHERE cacheKey = ?1 ORDER BY storedAt DESC, id DESC
            """

        let handle: OpaquePointer
        let hit: OpaquePointer

        init(path: String) throws(DatabaseError) {
            var handle: OpaquePointer?
            let opened = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
            guard opened == SQLITE_OK, let handle else {
                let error = Self.error(opened, handle)
                sqlite3_close_v2(handle)
                throw error
            }
            // As GRDB's connections to the cache: a lock held elsewhere (WAL recovery) is waited for.
            sqlite3_busy_timeout(handle, 5000)
            var hit: OpaquePointer?
            let prepared = sqlite3_prepare_v3(handle, Self.hitSQL, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &hit, nil)
            guard prepared == SQLITE_OK, let hit else {
                let error = Self.error(prepared, handle)
                sqlite3_close_v2(handle)
                throw error
            }
            self.handle = handle
            self.hit = hit
        }

        deinit {
            sqlite3_finalize(hit)
            sqlite3_close_v2(handle)
        }

        /// Runs the hit's statement for `key`, calling `row` for each row (the statement positioned
        /// on it); the statement is reset after, which ends the read's snapshot.
        func rows(for key: String, _ row: (Row) throws -> Void) throws {
            // Reset after (ending the read's snapshot); the key is bound anew on every call.
            defer { sqlite3_reset(hit) }
            let bound = key.withCString { sqlite3_bind_text(hit, 1, $0, -1, SQLITE_TRANSIENT) }
            guard bound == SQLITE_OK else { throw Self.error(bound, handle) }
            while true {
                let stepped = sqlite3_step(hit)
                switch stepped {
                case SQLITE_ROW: try row(Row(statement: hit))
                case SQLITE_DONE: return
                default: throw Self.error(stepped, handle)
                }
            }
        }

        static func error(_ code: Int32, _ handle: OpaquePointer?) -> DatabaseError {
            let message = handle.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: hitSQL)
        }
    }

    /// The row a hit's statement is positioned on: each column as whatever SQLite holds.
    struct Row {
        let statement: OpaquePointer

        subscript(_ column: Column) -> StoredColumn {
            let index = column.rawValue
            let name = column.name
            switch sqlite3_column_type(statement, index) {
            case SQLITE_INTEGER:
                return StoredColumn(name: name, value: sqlite3_column_int64(statement, index))
            case SQLITE_FLOAT:
                return StoredColumn(name: name, value: sqlite3_column_double(statement, index))
            case SQLITE_TEXT:
                let bytes = UnsafeRawBufferPointer(
                    start: sqlite3_column_text(statement, index),
                    count: Int(sqlite3_column_bytes(statement, index))
                )
                // Text that is not UTF-8 is kept as bytes: read as text, it is a damaged row.
                if let text = String(validating: bytes, as: UTF8.self) { return StoredColumn(name: name, value: text) }
                return StoredColumn(name: name, value: Data(bytes))
            case SQLITE_BLOB:
                return StoredColumn(name: name, value: Data(blob(index)))
            default:
                return StoredColumn(name: name, value: nil)
            }
        }

        /// A blob column's bytes, valid until the statement moves on; `nil` for any other type.
        func bytes(_ column: Column) -> UnsafeRawBufferPointer? {
            sqlite3_column_type(statement, column.rawValue) == SQLITE_BLOB ? blob(column.rawValue) : nil
        }

        private func blob(_ index: Int32) -> UnsafeRawBufferPointer {
            let start = sqlite3_column_blob(statement, index)
            return UnsafeRawBufferPointer(start: start, count: start == nil ? 0 : Int(sqlite3_column_bytes(statement, index)))
        }
    }

    /// How many idle connections stay open.
    static let keptIdle = 4

    private let path: String
    private let idle = Lock<[Connection]>([])

    init(path: String) {
        self.path = path
    }

    /// Runs `body` with a connection of its own: an idle one, or one opened now.
    func withConnection<T>(_ body: (Connection) throws -> T) throws -> T {
        let connection = try idle.withLock { $0.popLast() } ?? Connection(path: path)
        // A connection that failed (a damaged file, an I/O error) is not used again.
        let result = try body(connection)
        idle.withLock { if $0.count < Self.keptIdle { $0.append(connection) } }
        return result
    }

    /// Closes the idle connections (before the pool's, which must be the last to close).
    func close() {
        idle.withLock { $0.removeAll() }
    }
}

/// SQLite's "copy the bound text now" destructor.
private let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
