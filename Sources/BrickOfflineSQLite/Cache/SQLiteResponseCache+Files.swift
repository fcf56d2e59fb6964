import BrickOfflineCore
@_spi(TransportImplementation) import BrickRequest
import Foundation
import GRDB
import HTTPTypes
import Synchronization
internal import CZlib

/// The cache's rows and files: reading a row back into a response, writing a body file
/// atomically, eviction, removal, the version check and the sweep of orphaned files.
extension SQLiteResponseCache {
    /// The response a row holds, or why it holds none: a wrongly typed column, a NULL, a body file
    /// name that is not one this cache made, a body of the wrong size or checksum. Never traps.
    func response(from row: CacheReaders.Row, id: Int64, key: CacheKey) throws(DamagedRow) -> CachedResponse {
        let bodySize = try row[.bodySize].integer()
        let body: Data
        if let file = try row[.bodyFile].optionalText() {
            guard Self.isBodyFileName(file) else {
                throw DamagedRow(reason: "damaged row: body file \(file.prefix(60).debugDescription) is not a name this cache made")
            }
            guard let data = FileManager.default.contents(atPath: bodiesDirectory + "/" + file), data.count == bodySize else {
                throw DamagedRow(reason: "the body file \(file) is missing or of the wrong size")
            }
            guard let digest = try row[.bodyDigest].optionalInteger(), digest == Self.digest(data) else {
                throw DamagedRow(reason: "the body file \(file) does not match its checksum")
            }
            body = data
        } else {
            body = try row[.body].optionalBytes() ?? Data()
            guard body.count == bodySize else { throw DamagedRow(reason: "damaged row: the body is not of its recorded size") }
        }
        let status = try row[.status].integer()
        guard (100...999).contains(status) else { throw DamagedRow(reason: "damaged row: status \(status)") }
        let requestTime = try row[.requestTime].date()
        let responseTime = try row[.responseTime].date()
        let parsed = try parsedHeaders(of: row, id: id, status: Int(status), requestTime: requestTime, responseTime: responseTime)
        return CachedResponse(
            key: key,
            variant: try row[.variant].text(),
            status: Int(status),
            headerFields: parsed.fields,
            facts: parsed.facts,
            body: body,
            url: try row[.url].text(),
            requestTime: requestTime,
            responseTime: responseTime
        )
    }

    /// A row's header block as stored, with what was parsed from it and the status and times
    /// the facts were computed with: reused only when all of them are the row's again.
    struct ParsedHeaders: Sendable {
        var raw: [UInt8]
        var status: Int
        var requestTime: Date
        var responseTime: Date
        var fields: HTTPFields
        var facts: StoredResponseFacts
    }

    /// The header fields of the row `id` and the facts the rules read from them: parsed once per
    /// stored header block and kept (``ParsedHeaders``) — a hit on a row read before compares its
    /// bytes and times with what was parsed, and parses nothing.
    private func parsedHeaders(
        of row: CacheReaders.Row,
        id: Int64,
        status: Int,
        requestTime: Date,
        responseTime: Date
    ) throws(DamagedRow) -> (fields: HTTPFields, facts: StoredResponseFacts) {
        let raw: [UInt8]
        if let bytes = row.bytes(.headers) {
            let kept = parsed.withLock { $0[id] }
            if let kept, kept.status == status, kept.requestTime == requestTime, kept.responseTime == responseTime,
                kept.raw.elementsEqual(bytes)
            {
                return (kept.fields, kept.facts)
            }
            raw = [UInt8](bytes)
        } else {
            raw = [UInt8](try row[.headers].bytes())
        }
        let fields = CachedResponse.headerFields(fromRaw: raw)
        let facts = StoredResponseFacts(status: status, fields: fields, requestTime: requestTime, responseTime: responseTime)
        let entry = ParsedHeaders(raw: raw, status: status, requestTime: requestTime, responseTime: responseTime, fields: fields, facts: facts)
        parsed.withLock { kept in
            // Bounded: at the bound, what was kept is dropped (rows read again are parsed again).
            if kept.count >= Self.parsedHeadersKept { kept.removeAll(keepingCapacity: true) }
            kept[id] = entry
        }
        return (fields, facts)
    }

    /// Whether `name` is a body file name this cache makes (a lower-case UUID, nothing else): a row
    /// naming anything else — `../../etc/hostname`, an absolute path — is never read or deleted.
    static func isBodyFileName(_ name: String) -> Bool {
        name.utf8.count == 36 && UUID(uuidString: name)?.uuidString.lowercased() == name
    }

    /// The body file's checksum kept in its row: CRC-32 (zlib), which catches a file overwritten,
    /// truncated and padded, or swapped with another.
    static func digest(_ data: Data) -> Int64 {
        Int64(
            data.withUnsafeBytes { bytes -> UInt in
                var crc: UInt = 0
                var offset = 0
                while offset < bytes.count {
                    let chunk = min(bytes.count - offset, Int(UInt32.max))
                    crc = crc32(crc, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset, UInt32(chunk))
                    offset += chunk
                }
                return crc
            }
        )
    }

    /// The body file names in `rows`' `bodyFile` column that this cache may delete.
    static func deletableFiles(_ rows: [Row]) -> [String] {
        rows.compactMap { $0["bodyFile"] as? String }.filter(isBodyFileName)
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
                let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
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

    /// The running total of the bytes stored, read without trusting the file.
    static func totalBytes(_ db: Database) throws -> Int {
        let row = try Row.fetchOne(db, sql: "SELECT bytes FROM total")
        return row.flatMap { try? StoredColumn($0, "bytes").integer() }.map { Int(clamping: $0) } ?? 0
    }

    /// Deletes the least recently used rows, one at a time, until the total fits; returns their
    /// body files.
    static func evict(_ db: Database, toFit maxBytes: Int) throws -> [String] {
        var files: [String] = []
        var total = try Self.totalBytes(db)
        while total > maxBytes {
            let victims = try Row.fetchAll(
                db,
                sql: "SELECT id, bodyFile, size FROM response ORDER BY lastAccess, id LIMIT 32"
            )
            if victims.isEmpty { break }
            for victim in victims where total > maxBytes {
                files += deletableFiles([victim])
                try db.execute(sql: "DELETE FROM response WHERE id = ?", arguments: [victim["id"] as? Int64])
                total -= Int(clamping: (try? StoredColumn(victim, "size").integer()) ?? 0)
            }
        }
        return files
    }

    func remove(where condition: String, _ arguments: StatementArguments, doing what: String) throws(BrickError) {
        let files: [String]
        do {
            files = try pool.write { db in
                let files = Self.deletableFiles(
                    try Row.fetchAll(
                        db,
                        sql: "SELECT bodyFile FROM response WHERE bodyFile IS NOT NULL AND \(condition)",
                        arguments: arguments
                    )
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
                let stored = try Row.fetchOne(db, sql: "SELECT value FROM meta WHERE name = 'version'")?["value"] as? Int64
                guard stored != Int64(version) else { return [] }
                let files = Self.deletableFiles(try Row.fetchAll(db, sql: "SELECT bodyFile FROM response WHERE bodyFile IS NOT NULL"))
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
            let referenced = try? pool.read({ Set(Self.deletableFiles(try Row.fetchAll($0, sql: "SELECT bodyFile FROM response WHERE bodyFile IS NOT NULL"))) })
        else { return }
        let cutoff = Date().addingTimeInterval(-3600)
        // Only files this cache makes (and their temporary names) are ever deleted.
        for name in names where !referenced.contains(name) && Self.isBodyFileName(name.hasSuffix(".tmp") ? String(name.dropLast(4)) : name) {
            let file = bodiesDirectory + "/" + name
            let modified = (try? FileManager.default.attributesOfItem(atPath: file)[.modificationDate]) as? Date
            if let modified, modified < cutoff { unlink(file) }
        }
    }
}

extension SQLiteResponseCache {
    /// Whether a failure is one another process's connection closing can cause for a moment
    /// (busy, an I/O or locking protocol error, the WAL index read mid-reset).
    static func isTransient(_ error: BrickError) -> Bool {
        guard let database = error.underlying as? DatabaseError else { return false }
        return [.SQLITE_BUSY, .SQLITE_IOERR, .SQLITE_PROTOCOL, .SQLITE_CORRUPT].contains(database.resultCode)
    }

    static func storageError(_ error: any Error, doing what: String) -> BrickError {
        if let error = error as? BrickError { return error }
        if let error = error as? DatabaseError {
            switch error.resultCode {
            case .SQLITE_FULL:
                return BrickError(.storage, message: "cannot \(what): the disk is full", underlying: error)
            case .SQLITE_CORRUPT, .SQLITE_NOTADB:
                return BrickError(.storage, message: "cannot \(what): the cache file is damaged", underlying: error)
            default:
                return BrickError(.storage, message: "cannot \(what): \(error.message ?? "\(error.resultCode)")", underlying: error)
            }
        }
        return BrickError(.storage, message: "cannot \(what): \(error.localizedDescription)", underlying: error)
    }
}
