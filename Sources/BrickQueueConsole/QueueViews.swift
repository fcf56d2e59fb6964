import BrickOfflineCore
import BrickRequest
import Foundation

/// One queue's counts, as `status` shows them.
package struct QueueSummary {
    package let queue: String
    package let pending: Int
    /// Pending, not leased, and due (its next attempt's date has come).
    package let due: Int
    /// Under a worker's lease now.
    package let leased: Int
    /// How many each worker holds, where the store records who (PostgreSQL).
    package let leasedBy: [String: Int]
    package let dead: Int
    package let oldestPendingSeconds: Double?
    /// Since when an operator paused the queue, or `nil`.
    package let pausedSince: Date?

    /// Attempts that ended in the last minute (this clock minute and the one before) and in the
    /// last hour (the 60 minutes before this one, and this one): delivered, and failed.
    package let deliveredLastMinute: Int
    package let deliveredLastHour: Int
    package let failedLastMinute: Int
    package let failedLastHour: Int

    package init(_ counts: OfflineQueueCounts, deliveries: [OfflineDeliveryMinute], now: Date) {
        queue = counts.queue
        pausedSince = counts.pausedSince
        pending = counts.pending
        leased = counts.leased
        leasedBy = counts.leasedBy
        due = counts.due
        dead = counts.dead
        oldestPendingSeconds = counts.oldestPendingAt.map { max(0, now.timeIntervalSince($0)) }
        let thisMinute = (now.timeIntervalSince1970 / 60).rounded(.down) * 60
        let lastMinute = deliveries.filter { $0.minute.timeIntervalSince1970 >= thisMinute - 60 }
        deliveredLastMinute = lastMinute.reduce(0) { $0 + $1.delivered }
        failedLastMinute = lastMinute.reduce(0) { $0 + $1.failed }
        deliveredLastHour = deliveries.reduce(0) { $0 + $1.delivered }
        failedLastHour = deliveries.reduce(0) { $0 + $1.failed }
    }

    /// Every queue of `store`, counted by the store.
    package static func all(in store: any InspectableOfflineStore, now: Date) async throws -> [QueueSummary] {
        let thisMinute = (now.timeIntervalSince1970 / 60).rounded(.down) * 60
        let deliveries = Dictionary(
            grouping: try await store.deliveries(since: Date(timeIntervalSince1970: thisMinute - 3600)), by: \.queue
        )
        var counts = try await store.counts(at: now)
        // A queue emptied in the last hour stays in view, with what it delivered.
        let counted = Set(counts.map(\.queue))
        counts += deliveries.keys.filter { !counted.contains($0) }.map { OfflineQueueCounts(queue: $0) }
        return counts.sorted { $0.queue < $1.queue }.map { QueueSummary($0, deliveries: deliveries[$0.queue] ?? [], now: now) }
    }

    /// Field names are stable: scripts read them.
    package var json: [String: Any] {
        var object: [String: Any] = [
            "queue": queue, "pending": pending, "due": due, "leased": leased, "leasedBy": leasedBy, "dead": dead,
            "deliveredLastMinute": deliveredLastMinute, "deliveredLastHour": deliveredLastHour,
            "failedLastMinute": failedLastMinute, "failedLastHour": failedLastHour,
        ]
        object["oldestPendingSeconds"] = oldestPendingSeconds.map { ($0 * 1000).rounded() / 1000 } ?? NSNull()
        object["paused"] = pausedSince != nil
        object["pausedSince"] = pausedSince.map(Format.date) ?? NSNull()
        return object
    }
}

/// An entry as the commands show it: its stored request read back (method, URL without
/// credentials or query, header fields), its last outcome in words.
package struct EntryView {
    package let entry: OfflineEntry
    package let method: String
    package let url: String
    package let headers: [(name: String, value: String)]
    package let body: Data?

    package init(_ entry: OfflineEntry) {
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
    package var host: String {
        guard let start = url.range(of: "://")?.upperBound else { return url }
        let rest = url[start...]
        return String(rest.prefix { $0 != "/" })
    }

    /// `HTTP 503`, `error: connection refused`, or `-` before the first attempt.
    package var lastOutcome: String {
        guard let last = entry.lastAttempt else { return "-" }
        if let status = last.status { return "HTTP \(status)" }
        return last.error.map { "error: \($0)" } ?? "-"
    }

    package static let bodyLimit = 64 * 1024

    package var bodyText: String? {
        guard let body, !body.isEmpty else { return nil }
        return String(data: body.prefix(Self.bodyLimit), encoding: .utf8)
    }

    package var bodyHex: String? {
        guard let body, !body.isEmpty else { return nil }
        return body.prefix(Self.bodyLimit).map { String(format: "%02x", $0) }.joined()
    }

    /// Field names are stable: scripts read them.
    package func json(body includeBody: Bool) -> [String: Any] {
        var object: [String: Any] = [
            "id": entry.id.uuidString, "queue": entry.queue, "createdAt": Format.date(entry.createdAt),
            "attempts": entry.attempts, "nextAttemptAt": Format.date(entry.notBefore), "method": method, "url": url,
            "idempotencyKey": entry.idempotencyKey,
        ]
        object["maxAttempts"] = entry.maxAttempts ?? NSNull()
        object["dedupeKey"] = entry.dedupeKey ?? NSNull()
        object["leasedUntil"] = entry.lease.map { Format.date($0.expiresAt) } ?? NSNull()
        object["leasedBy"] = entry.lease?.owner ?? NSNull()
        object["lastAttemptAt"] = entry.lastAttempt.map { Format.date($0.date) } ?? NSNull()
        object["lastStatus"] = entry.lastAttempt?.status ?? NSNull()
        object["lastError"] = entry.lastAttempt?.error ?? NSNull()
        object["deadAt"] = entry.deadLetter.map { Format.date($0.date) } ?? NSNull()
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


/// Dead letters that died the same way: same queue, same host, same last outcome.
package struct DeadReasonGroup {
    package let queue: String
    package let host: String
    /// `HTTP 401`, `error: …`, or the death's reason when no attempt was recorded (expired).
    package let outcome: String
    package let count: Int
    package let first: Date
    package let last: Date

    package static func groups(_ letters: [EntryView]) -> [DeadReasonGroup] {
        struct Key: Hashable { let queue, host, outcome: String }
        let byKey = Dictionary(grouping: letters) { Key(queue: $0.entry.queue, host: $0.host, outcome: outcome(of: $0)) }
        return byKey.map { key, members in
            let dates = members.map { $0.entry.deadLetter?.date ?? $0.entry.createdAt }
            return DeadReasonGroup(
                queue: key.queue, host: key.host, outcome: key.outcome, count: members.count,
                first: dates.min()!, last: dates.max()!
            )
        }.sorted { ($0.count, $1.queue, $1.host, $1.outcome) > ($1.count, $0.queue, $0.host, $0.outcome) }
    }

    package static func outcome(of letter: EntryView) -> String {
        letter.entry.lastAttempt == nil ? (letter.entry.deadLetter?.reason ?? "-") : letter.lastOutcome
    }

    /// Field names are stable: scripts read them.
    package var json: [String: Any] {
        ["queue": queue, "host": host, "outcome": outcome, "count": count,
         "firstDeadAt": Format.date(first), "lastDeadAt": Format.date(last)]
    }
}


/// How dates, ages and durations read, in the command line and the console alike.
package enum Format {
    /// ISO 8601 in UTC, to the second; a date a store row holds outside years 1–9999 (a damaged
    /// or hostile row) reads `out of range`, never converted.
    package static func date(_ date: Date) -> String {
        guard (-62_135_596_800.0...253_402_300_799.0).contains(date.timeIntervalSince1970) else { return "out of range" }
        return date.formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: false).timeSeparator(.colon))
    }

    /// `42s`, `17m`, `3h5m`, `2d4h`.
    /// An age past 100,000 years (an absurd date in a store row) reads as that bound, never traps.
    package static func age(_ seconds: Double) -> String {
        let total = seconds.isNaN ? 0 : Int(min(max(seconds, 0), 3_155_760_000_000))
        if total < 60 { return "\(total)s" }
        if total < 3600 { return "\(total / 60)m" }
        if total < 86_400 { return "\(total / 3600)h\(total % 3600 / 60)m" }
        return "\(total / 86_400)d\(total % 86_400 / 3600)h"
    }

    /// The minute `date` falls in, counted from 1970; `nil` for a date outside years 1–9999.
    package static func minute(of date: Date) -> Int? {
        let seconds = date.timeIntervalSince1970
        guard (-62_135_596_800.0...253_402_300_799.0).contains(seconds) else { return nil }
        return Int((seconds / 60).rounded(.down))
    }

    /// `30s`, `15m`, `1h`, `7d` in seconds; `nil` for anything else.
    package static func seconds(_ text: String) -> Double? {
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
