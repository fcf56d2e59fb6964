import BrickOfflineCore
import BrickRequest
import Foundation

/// One queue's counts, as `status` shows them.
struct QueueSummary {
    let queue: String
    let pending: Int
    /// Pending, not leased, and due (its next attempt's date has come).
    let due: Int
    /// Under a worker's lease now.
    let leased: Int
    /// How many each worker holds, where the store records who (PostgreSQL).
    let leasedBy: [String: Int]
    let dead: Int
    let oldestPendingSeconds: Double?
    /// Since when an operator paused the queue, or `nil`.
    let pausedSince: Date?

    init(queue: String, pending: [OfflineEntry], dead: [OfflineEntry], pausedSince: Date?, now: Date) {
        self.queue = queue
        self.pausedSince = pausedSince
        self.pending = pending.count
        let leased = pending.filter { ($0.lease?.expiresAt ?? .distantPast) > now }
        self.leased = leased.count
        self.leasedBy = Dictionary(grouping: leased.compactMap { $0.lease?.owner }, by: { $0 }).mapValues(\.count)
        self.due = pending.filter { $0.notBefore <= now && ($0.lease?.expiresAt ?? .distantPast) <= now }.count
        self.dead = dead.count
        self.oldestPendingSeconds = pending.map(\.createdAt).min().map { max(0, now.timeIntervalSince($0)) }
    }

    /// Field names are stable: scripts read them.
    var json: [String: Any] {
        var object: [String: Any] = [
            "queue": queue, "pending": pending, "due": due, "leased": leased, "leasedBy": leasedBy, "dead": dead,
        ]
        object["oldestPendingSeconds"] = oldestPendingSeconds.map { ($0 * 1000).rounded() / 1000 } ?? NSNull()
        object["paused"] = pausedSince != nil
        object["pausedSince"] = pausedSince.map(Output.date) ?? NSNull()
        return object
    }
}

/// An entry as the commands show it: its stored request read back (method, URL without
/// credentials or query, header fields), its last outcome in words.
struct EntryView {
    let entry: OfflineEntry
    let method: String
    let url: String
    let headers: [(name: String, value: String)]
    let body: Data?

    init(_ entry: OfflineEntry) {
        self.entry = entry
        if let stored = try? StoredRequest.decoded(entry.payload) {
            method = stored.method
            // As telemetry records it: no user:password@, no query (it may carry a token).
            url = (try? TransportRequest(method: HTTPRequest.Method(stored.method) ?? .get, url: stored.url))?.redactedURL
                ?? "(an unreadable URL)"
            headers = stored.headers.compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil }
            body = stored.body
        } else {
            (method, url, headers, body) = ("?", "(an entry this version cannot read)", [], nil)
        }
    }

    /// The URL's host (and port when it has one), for grouping.
    var host: String {
        guard let start = url.range(of: "://")?.upperBound else { return url }
        let rest = url[start...]
        return String(rest.prefix { $0 != "/" })
    }

    /// `HTTP 503`, `error: connection refused`, or `-` before the first attempt.
    var lastOutcome: String {
        guard let last = entry.lastAttempt else { return "-" }
        if let status = last.status { return "HTTP \(status)" }
        return last.error.map { "error: \($0)" } ?? "-"
    }

    static let bodyLimit = 64 * 1024

    var bodyText: String? {
        guard let body, !body.isEmpty else { return nil }
        return String(data: body.prefix(Self.bodyLimit), encoding: .utf8)
    }

    var bodyHex: String? {
        guard let body, !body.isEmpty else { return nil }
        return body.prefix(Self.bodyLimit).map { String(format: "%02x", $0) }.joined()
    }

    /// Field names are stable: scripts read them.
    func json(body includeBody: Bool) -> [String: Any] {
        var object: [String: Any] = [
            "id": entry.id.uuidString, "queue": entry.queue, "createdAt": Output.date(entry.createdAt),
            "attempts": entry.attempts, "nextAttemptAt": Output.date(entry.notBefore), "method": method, "url": url,
            "idempotencyKey": entry.idempotencyKey,
        ]
        object["maxAttempts"] = entry.maxAttempts ?? NSNull()
        object["dedupeKey"] = entry.dedupeKey ?? NSNull()
        object["leasedUntil"] = entry.lease.map { Output.date($0.expiresAt) } ?? NSNull()
        object["leasedBy"] = entry.lease?.owner ?? NSNull()
        object["lastAttemptAt"] = entry.lastAttempt.map { Output.date($0.date) } ?? NSNull()
        object["lastStatus"] = entry.lastAttempt?.status ?? NSNull()
        object["lastError"] = entry.lastAttempt?.error ?? NSNull()
        object["deadAt"] = entry.deadLetter.map { Output.date($0.date) } ?? NSNull()
        object["deadReason"] = entry.deadLetter?.reason ?? NSNull()
        object["headers"] = headers.map { [$0.name, $0.value] }
        if includeBody {
            object["bodyText"] = bodyText ?? NSNull()
            object["bodyHex"] = bodyText == nil ? (bodyHex ?? NSNull()) : NSNull()
            object["bodyBytes"] = body?.count ?? 0
        }
        return object
    }
}

/// How the commands print.
enum Output {
    /// One JSON object on a line of its own (sorted keys: a stable order for people and diffs).
    static func line(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return
        }
        print(String(decoding: data, as: UTF8.self))
    }

    /// Columns padded to their widest cell.
    static func table(_ header: [String], _ rows: [[String]]) {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        for row in all {
            let cells = row.indices.map { column in
                column == row.count - 1 ? row[column] : row[column].padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }
            print(cells.joined(separator: "  "))
        }
    }

    /// ISO 8601 in UTC, to the second.
    static func date(_ date: Date) -> String {
        date.formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: false).timeSeparator(.colon))
    }

    /// `42s`, `17m`, `3h5m`, `2d4h`.
    static func age(_ seconds: Double) -> String {
        let total = Int(seconds)
        if total < 60 { return "\(total)s" }
        if total < 3600 { return "\(total / 60)m" }
        if total < 86_400 { return "\(total / 3600)h\(total % 3600 / 60)m" }
        return "\(total / 86_400)d\(total % 86_400 / 3600)h"
    }

    /// `30s`, `15m`, `1h`, `7d` in seconds; `nil` for anything else.
    static func seconds(_ text: String) -> Double? {
        guard let unit = text.last, let value = Double(text.dropLast()), value >= 0 else { return nil }
        switch unit {
        case "s": return value
        case "m": return value * 60
        case "h": return value * 3600
        case "d": return value * 86_400
        default: return nil
        }
    }
}
