import BrickRequest
import Foundation
import GRDB
import HTTPTypes

/// The cache's rows and files: reading a row back into a response, writing a body file
/// atomically, eviction, removal, the version check and the sweep of orphaned files.
extension SQLiteResponseCache {
    func response(from row: Row, key: CacheKey) -> CachedResponse? {
        let bodySize: Int = row["bodySize"]
        let body: Data
        if let file = row["bodyFile"] as String? {
            guard let data = FileManager.default.contents(atPath: bodiesDirectory + "/" + file), data.count == bodySize
            else { return nil }
            body = data
        } else {
            body = row["body"] ?? Data()
            guard body.count == bodySize else { return nil }
        }
        let headers: Data = row["headers"]
        return CachedResponse(
            key: key,
            variant: row["variant"],
            status: row["status"],
            headerFields: CachedResponse.headerFields(fromRaw: Array(headers)),
            body: body,
            url: row["url"],
            requestTime: Date(timeIntervalSince1970: row["requestTime"]),
            responseTime: Date(timeIntervalSince1970: row["responseTime"])
        )
    }

    /// Writes a body to a new file under a temporary name, then renames it into place; returns its
    /// name in ``bodiesDirectory``.
    func writeBodyFile(_ body: Data) throws(BrickError) -> String {
        let name = UUID().uuidString.lowercased()
        let temporary = bodiesDirectory + "/" + name + ".tmp"
        let descriptor = Glibc.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw BrickError(.storage, message: "cannot create \(temporary): \(String(cString: strerror(errno)))")
        }
        let failure: Int32? = body.withUnsafeBytes { bytes -> Int32? in
            var offset = 0
            while offset < bytes.count {
                let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += written
            }
            return nil
        }
        close(descriptor)
        if let failure {
            unlink(temporary)
            throw BrickError(
                .storage,
                message: failure == ENOSPC ? "the disk is full: cannot write \(temporary)" : "cannot write \(temporary): \(String(cString: strerror(failure)))"
            )
        }
        guard rename(temporary, bodiesDirectory + "/" + name) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw BrickError(.storage, message: "cannot move \(temporary) into place: \(reason)")
        }
        return name
    }

    /// Deletes the least recently used rows, one at a time, until the total fits; returns their
    /// body files.
    static func evict(_ db: Database, toFit maxBytes: Int) throws -> [String] {
        var files: [String] = []
        var total = try Int.fetchOne(db, sql: "SELECT bytes FROM total") ?? 0
        while total > maxBytes {
            let victims = try Row.fetchAll(
                db,
                sql: "SELECT id, bodyFile, size FROM response ORDER BY lastAccess, id LIMIT 32"
            )
            if victims.isEmpty { break }
            for victim in victims where total > maxBytes {
                if let file = victim["bodyFile"] as String? { files.append(file) }
                try db.execute(sql: "DELETE FROM response WHERE id = ?", arguments: [victim["id"] as Int64])
                total -= victim["size"] as Int
            }
        }
        return files
    }

    func remove(where condition: String, _ arguments: StatementArguments, doing what: String) throws(BrickError) {
        let files: [String]
        do {
            files = try pool.write { db in
                let files = try String.fetchAll(
                    db,
                    sql: "SELECT bodyFile FROM response WHERE bodyFile IS NOT NULL AND \(condition)",
                    arguments: arguments
                )
                try db.execute(sql: "DELETE FROM response WHERE \(condition)", arguments: arguments)
                return files
            }
        } catch {
            throw Self.storageError(error, doing: what)
        }
        for file in files { unlink(bodiesDirectory + "/" + file) }
    }

    /// Drops every entry when the cache was written with another version; returns their files.
    func dropIfOtherVersion() throws(BrickError) -> [String] {
        let version = self.version
        do {
            return try pool.write { db -> [String] in
                let stored = try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'version'")
                guard stored != version else { return [] }
                let files = try String.fetchAll(db, sql: "SELECT bodyFile FROM response WHERE bodyFile IS NOT NULL")
                try db.execute(sql: "DELETE FROM response")
                try db.execute(sql: "INSERT OR REPLACE INTO meta (name, value) VALUES ('version', ?)", arguments: [version])
                return stored == nil ? [] : files
            }
        } catch {
            throw Self.storageError(error, doing: "check the version of \(path)")
        }
    }

    /// Deletes body files no row names, once they are an hour old (younger ones may belong to a
    /// write in flight in another process).
    func sweepOrphanFiles() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: bodiesDirectory),
            let referenced = try? pool.read({ try Set(String.fetchAll($0, sql: "SELECT bodyFile FROM response WHERE bodyFile IS NOT NULL")) })
        else { return }
        let cutoff = Date().addingTimeInterval(-3600)
        for name in names where !referenced.contains(name) {
            let file = bodiesDirectory + "/" + name
            let modified = (try? FileManager.default.attributesOfItem(atPath: file)[.modificationDate]) as? Date
            if let modified, modified < cutoff { unlink(file) }
        }
    }
}
