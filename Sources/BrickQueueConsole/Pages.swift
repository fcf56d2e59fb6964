import BrickOfflineCore
import BrickRequest
import Foundation
import Hummingbird
import ServiceLifecycle
import Synchronization

extension QueueConsole {
    // MARK: - Responses

    func html(_ title: String, _ body: String, status: HTTPResponse.Status = .ok, live: Bool = false) -> Response {
        Response(
            status: status,
            headers: [
                .contentType: "text/html; charset=utf-8",
                .cacheControl: "no-store",
                // No other origin may frame the console (clickjacking on its buttons).
                .contentSecurityPolicy: "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
            ],
            body: ResponseBody(byteBuffer: ByteBuffer(string: HTML.page(title: title, base: basePath, body: body, live: live)))
        )
    }

    func text(_ status: HTTPResponse.Status, _ message: String) -> Response {
        Response(
            status: status,
            headers: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: message + "\n"))
        )
    }

    /// A redirect to `path`, whose page shows `flash`: the message stays on the server, the URL
    /// carries only a random reference to it (a link cannot make the console report what it
    /// did not do).
    func redirect(_ path: String, flash: String? = nil) -> Response {
        let query = flash.map { "?done=" + flashes.keep($0) } ?? ""
        return Response(status: .seeOther, headers: [.location: basePath + path + query])
    }

    var csrfField: String { "<input type=\"hidden\" name=\"csrf\" value=\"\(HTML.escape(Self.csrf))\">" }

    /// A one-button form posting to `path`.
    func button(_ label: String, _ path: String, style: String = "", fields: [String: String] = [:], confirm: String? = nil) -> String {
        let hidden = fields.sorted { $0.key < $1.key }.map {
            "<input type=\"hidden\" name=\"\(HTML.escape($0.key))\" value=\"\(HTML.escape($0.value))\">"
        }.joined()
        return """
            <form class="inline" method="post" action="\(HTML.escape(basePath + path))">\(csrfField)\(hidden)\
            <button type="submit" class="\(style)">\(HTML.escape(label))</button></form>
            """
    }

    func flash(_ request: Request) -> String {
        guard let reference = request.uri.queryParameters["done"].map(String.init), let done = flashes.message(reference) else { return "" }
        return "<p class=\"flash\">\(HTML.escape(done))</p>"
    }

    // MARK: - Overview

    func overview(_ request: Request) async throws -> Response {
        let now = Date()
        let summaries = try await QueueSummary.all(in: store, now: now)
        let thisMinute = (now.timeIntervalSince1970 / 60).rounded(.down) * 60
        let minutes = Dictionary(
            grouping: try await store.deliveries(since: Date(timeIntervalSince1970: thisMinute - 3600)), by: \.queue
        )
        var groups: [DeadReasonGroup] = []
        for summary in summaries where summary.dead > 0 {
            groups += DeadReasonGroup.groups(try await store.page(queue: summary.queue, dead: true, after: nil, limit: 10_000).map(EntryView.init))
        }
        var rows = ""
        for summary in summaries {
            let queue = HTML.escape(summary.queue)
            let link = HTML.escape(basePath + "/queues/" + HTML.segment(summary.queue))
            func cell(_ field: String, _ value: Int, _ style: String = "") -> String {
                "<td class=\"n \(style)\" data-count=\"\(queue) \(field)\">\(value)</td>"
            }
            let state =
                summary.pausedSince.map { "<span class=\"paused\">paused</span> since \(HTML.escape(Format.date($0)))" }
                ?? "<span class=\"ok\">running</span>"
            let toggle =
                summary.pausedSince == nil
                ? button("Pause", "/queues/\(HTML.segment(summary.queue))/pause")
                : button("Resume", "/queues/\(HTML.segment(summary.queue))/resume", style: "primary")
            rows += """
                <tr><td><a href="\(link)">\(queue)</a></td>\(cell("pending", summary.pending))\(cell("due", summary.due))\
                \(cell("leased", summary.leased))<td class="n"><a class="dead" href="\(link)?dead=1" data-count="\(queue) dead">\(summary.dead)</a></td>\
                <td class="n" data-count="\(queue) oldest">\(summary.oldestPendingSeconds.map(Format.age) ?? "–")</td>\
                \(cell("delivered", summary.deliveredLastHour, "ok"))\(cell("failed", summary.failedLastHour, "dead"))\
                <td data-chart="\(queue)">\(Self.chart(minutes[summary.queue] ?? [], now: now))</td><td>\(state) \(toggle)</td></tr>
                """
        }
        var body = "<h1>Queues</h1>\(flash(request))"
        if summaries.isEmpty {
            body += "<p class=\"muted\">No queue holds an entry.</p>"
        } else {
            body += """
                <table id="queues"><thead><tr><th>Queue</th><th>Pending</th><th>Due</th><th>Leased</th><th>Dead</th>\
                <th>Oldest</th><th>Delivered 1h</th><th>Failed 1h</th><th>Per minute, last hour</th><th>State</th></tr></thead>
                <tbody>\(rows)</tbody></table><p class="muted" id="updated">counts as of \(HTML.escape(Format.date(now)))</p>
                """
        }
        if !groups.isEmpty {
            body += "<h2>Dead letters by reason</h2><table id=\"reasons\"><thead><tr><th>Queue</th><th>Count</th><th>Outcome</th><th>Host</th><th>First</th><th>Last</th><th></th></tr></thead><tbody>"
            for group in groups {
                let fields = ["outcome": group.outcome, "host": group.host]
                let path = "/queues/\(HTML.segment(group.queue))/dead"
                body += """
                    <tr><td>\(HTML.escape(group.queue))</td><td class="n">\(group.count)</td><td>\(HTML.escape(group.outcome))</td>\
                    <td>\(HTML.escape(group.host))</td><td>\(HTML.escape(Format.date(group.first)))</td><td>\(HTML.escape(Format.date(group.last)))</td>\
                    <td>\(button("Retry \(group.count)…", path + "/retry", style: "primary", fields: fields))\
                    \(button("Purge \(group.count)…", path + "/purge", style: "danger", fields: fields))</td></tr>
                    """
            }
            body += "</tbody></table>"
        }
        return html("Queues", body, live: true)
    }

    /// Delivered (green) and failed (red) per minute over the last hour, as an inline SVG.
    static func chart(_ minutes: [OfflineDeliveryMinute], now: Date) -> String {
        let thisMinute = Format.minute(of: now) ?? 0
        var delivered = [Int](repeating: 0, count: 60)
        var failed = [Int](repeating: 0, count: 60)
        for minute in minutes {
            guard let at = Format.minute(of: minute.minute) else { continue }
            let index = 59 - (thisMinute - at)
            guard (0..<60).contains(index) else { continue }
            delivered[index] += minute.delivered
            failed[index] += minute.failed
        }
        let top = max(1, zip(delivered, failed).map { $0 + $1 }.max() ?? 1)
        var bars = ""
        for index in 0..<60 {
            let green = Double(delivered[index]) / Double(top) * 28
            let red = Double(failed[index]) / Double(top) * 28
            let x = index * 3
            if green > 0 { bars += "<rect x=\"\(x)\" y=\"\(30 - green)\" width=\"2\" height=\"\(green)\" fill=\"#12b76a\"/>" }
            if red > 0 { bars += "<rect x=\"\(x)\" y=\"\(30 - green - red)\" width=\"2\" height=\"\(red)\" fill=\"#f04438\"/>" }
        }
        let total = delivered.reduce(0, +)
        let failures = failed.reduce(0, +)
        return """
            <svg class="chart" width="180" height="30" viewBox="0 0 180 30" role="img" aria-label="\(total) delivered, \(failures) failed in the last hour">\
            <rect x="0" y="29" width="180" height="1" fill="#e6e8eb"/>\(bars)</svg>
            """
    }

    // MARK: - Live updates

    /// Every second, each queue's counts as a `counts` event (server-sent events).
    func events() -> Response {
        let store = self.store
        return Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-store"],
            body: ResponseBody { writer in
                // Ends with the server's graceful shutdown (an open page must not hold a SIGTERM).
                let stopping = StopFlag()
                try? await withGracefulShutdownHandler {
                    try await Self.writeCounts(of: store, to: &writer, until: stopping)
                } onGracefulShutdown: {
                    stopping.stop()
                }
                try await writer.finish(nil)
            }
        )
    }

    /// Writes each queue's counts every second until the client goes or the task is cancelled.
    static func writeCounts(of store: any InspectableOfflineStore, to writer: inout any ResponseBodyWriter, until stopping: StopFlag) async throws {
                while !Task.isCancelled && !stopping.isStopped {
                    let now = Date()
                    let summaries = try await QueueSummary.all(in: store, now: now)
                    let thisMinute = (now.timeIntervalSince1970 / 60).rounded(.down) * 60
                    let minutes = Dictionary(
                        grouping: try await store.deliveries(since: Date(timeIntervalSince1970: thisMinute - 3600)), by: \.queue
                    )
                    // The chart is made of numbers only (no stored string): the page may insert it as markup.
                    let objects: [[String: Any]] = summaries.map {
                        ["queue": $0.queue, "pending": $0.pending, "due": $0.due, "leased": $0.leased, "dead": $0.dead,
                         "delivered": $0.deliveredLastHour, "failed": $0.failedLastHour, "paused": $0.pausedSince != nil,
                         "oldest": $0.oldestPendingSeconds.map(Format.age) ?? "–",
                         "chart": Self.chart(minutes[$0.queue] ?? [], now: now)]
                    }
                    let data = try JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys])
                    try await writer.write(ByteBuffer(string: "event: counts\ndata: \(String(decoding: data, as: UTF8.self))\n\n"))
                    try await Task.sleep(for: .seconds(1))
                }
    }

    // MARK: - A queue

    func queuePage(_ queue: String, request: Request) async throws -> Response {
        let dead = request.uri.queryParameters["dead"] == "1"
        let after = request.uri.queryParameters["after"].flatMap { UUID(uuidString: String($0)) }
        let entries = try await store.page(queue: queue, dead: dead, after: after, limit: pageSize + 1)
        let page = entries.prefix(pageSize).map(EntryView.init)
        let name = HTML.escape(queue)
        let base = HTML.escape(basePath + "/queues/" + HTML.segment(queue))
        var body = """
            <h1>\(name): \(dead ? "dead letters" : "pending")</h1>\(flash(request))
            <p><a href="\(base)">pending</a> · <a href="\(base)?dead=1">dead letters</a></p>
            """
        if dead && !page.isEmpty {
            body += "<p>\(button("Retry every dead letter of \(queue)…", "/queues/\(HTML.segment(queue))/dead/retry", style: "primary"))</p>"
        }
        if page.isEmpty {
            body += "<p class=\"muted\">\(dead ? "No dead letter." : "Nothing pending.")</p>"
        } else {
            body += """
                <table id="entries"><thead><tr><th>ID</th><th>Created</th><th>Attempts</th><th>\(dead ? "Died" : "Next attempt")</th>\
                <th>Request</th><th>\(dead ? "Reason" : "Last outcome")</th></tr></thead><tbody>
                """
            for view in page {
                let entry = view.entry
                body += """
                    <tr><td class="mono"><a href="\(HTML.escape(basePath))/entries/\(entry.id.uuidString)">\(entry.id.uuidString.prefix(8))…</a></td>\
                    <td>\(HTML.escape(Format.date(entry.createdAt)))</td><td class="n">\(entry.attempts)</td>\
                    <td>\(HTML.escape(Format.date(dead ? entry.deadLetter?.date ?? entry.notBefore : entry.notBefore)))\(entry.lease.map { _ in " <span class=\"muted\">(leased)</span>" } ?? "")</td>\
                    <td class="mono">\(HTML.escape(view.method)) \(HTML.escape(view.url))</td>\
                    <td>\(HTML.escape(dead ? entry.deadLetter?.reason ?? "" : view.lastOutcome))</td></tr>
                    """
            }
            body += "</tbody></table>"
            if entries.count > pageSize, let last = page.last {
                body += "<p><a id=\"next\" href=\"\(base)?\(dead ? "dead=1&amp;" : "")after=\(last.entry.id.uuidString)\">Next \(pageSize) →</a></p>"
            }
        }
        return html(queue, body)
    }

    // MARK: - An entry

    func entryPage(_ id: UUID, request: Request) async throws -> Response {
        guard let entry = try await store.entry(id) else {
            return html("Not found", "<h1>No entry \(id.uuidString)</h1>\(flash(request))<p class=\"muted\">Delivered, removed, or never there.</p>", status: .notFound)
        }
        let view = EntryView(entry)
        var fields: [(String, String)] = [
            ("ID", entry.id.uuidString), ("Queue", entry.queue), ("Request", "\(view.method) \(view.url)"),
            ("Created", Format.date(entry.createdAt)),
            ("Attempts", "\(entry.attempts)" + (entry.maxAttempts.map { " of \($0)" } ?? "")),
            ("Next attempt", Format.date(entry.notBefore)), ("Idempotency key", entry.idempotencyKey),
        ]
        if let key = entry.dedupeKey { fields.append(("Dedupe key", key)) }
        if let expiry = entry.expiresAt { fields.append(("Expires", Format.date(expiry))) }
        if let lease = entry.lease {
            fields.append(("Leased until", Format.date(lease.expiresAt) + (lease.owner.map { " by \($0)" } ?? "")))
        }
        if let last = entry.lastAttempt {
            fields.append(("Last attempt", "\(Format.date(last.date)): \(view.lastOutcome)"))
        }
        if let dead = entry.deadLetter { fields.append(("Dead since", "\(Format.date(dead.date)): \(dead.reason)")) }
        for header in view.headers { fields.append(("Header", "\(header.name): \(header.value)")) }
        var body = "<h1>Entry \(entry.id.uuidString.prefix(8))…</h1>\(flash(request))<dl id=\"fields\">"
        for (name, value) in fields { body += "<dt>\(HTML.escape(name))</dt><dd>\(HTML.escape(value))</dd>" }
        body += "</dl><p>"
        if entry.deadLetter != nil { body += button("Retry", "/entries/\(entry.id.uuidString)/retry", style: "primary") + " " }
        body += button("Remove", "/entries/\(entry.id.uuidString)/remove", style: "danger")
        body += "</p>"
        if entry.deadLetter != nil, let request = try? entry.queuedRequest() {
            body += """
                <form id="rewrite-form" method="post" action="\(HTML.escape(basePath))/entries/\(entry.id.uuidString)/retry">\(csrfField)\
                <label>Retry at a new URL: replace <input type="text" name="rewrite_from" size="40" value="\(HTML.escape(request.redactedURL))"></label>
                <label>with <input type="text" name="rewrite_to" size="40"></label>
                <button type="submit" class="primary">Retry at the new URL</button></form>
                """
        }
        if let text = view.bodyText {
            body += "<h2>Body (text\(view.body!.count > EntryView.bodyLimit ? ", first 64 KiB" : ""))</h2><pre>\(HTML.escape(text))</pre>"
        } else if let hex = view.bodyHex {
            body += "<h2>Body (hex\(view.body!.count > EntryView.bodyLimit ? ", first 64 KiB" : ""))</h2><pre>\(HTML.escape(hex))</pre>"
        }
        return html("Entry \(entry.id.uuidString)", body)
    }

    // MARK: - Changes

    /// Retries one dead letter; at a new URL when the form gives `rewrite_from` and `rewrite_to`.
    func retry(_ id: UUID, _ request: Request) async throws -> Response {
        var request = request
        let form = try await Form.read(&request)
        var at = ""
        do {
            if let rewrite = try form.rewrite() {
                at = " at " + (try await store.retryDeadLetter(id, rewritingURL: rewrite, now: Date())).redactedURL
            } else {
                try await store.retryDeadLetter(id, now: Date())
            }
        } catch let error as OfflineStoreError where error.kind == .notFound {
            return text(.conflict, "409: \(id) is not a dead letter (pending entries are retried by their queue)")
        } catch let error as BrickError {
            return text(.badRequest, "400: \(error.message)")
        }
        return redirect("/entries/\(id.uuidString)", flash: "Back to pending, due now\(at).")
    }

    func remove(_ id: UUID, _ request: Request) async throws -> Response {
        switch try await store.remove(id, unlessLeasedAt: Date()) {
        case .removed: return redirect("/", flash: "Entry \(id.uuidString) removed.")
        case .notFound: return text(.notFound, "404: no entry \(id.uuidString)")
        case .leased(let until):
            return text(.conflict, "409: a worker holds \(id.uuidString) until \(Format.date(until)); it was left to it — try again once its attempt ends")
        }
    }

    func setPaused(_ paused: Bool, _ queue: String, _ request: Request) async throws -> Response {
        try await store.setPaused(paused, queue: queue)
        return redirect("/", flash: paused ? "\(queue) paused: workers claim nothing from it until it is resumed." : "\(queue) resumed.")
    }

    /// Retry or purge a queue's dead letters — all, or one dead-reason group (`outcome`, `host`) —
    /// after a confirmation page that says how many. A retry may send them to a new address
    /// (`rewrite_from`, `rewrite_to`: a URL prefix and its replacement); those whose URL does not
    /// start with the prefix stay dead.
    func bulk(retrying: Bool, _ queue: String, _ request: Request) async throws -> Response {
        var request = request
        let form = try await Form.read(&request)
        let outcome = form["outcome"].flatMap { $0.isEmpty ? nil : $0 }
        let host = form["host"].flatMap { $0.isEmpty ? nil : $0 }
        let rewrite: URLRewrite?
        do {
            rewrite = retrying ? try form.rewrite() : nil
        } catch {
            return text(.badRequest, "400: \(error.message)")
        }
        let now = Date()
        let group = try await store.page(queue: queue, dead: true, after: nil, limit: 1_000_000).filter { letter in
            let view = EntryView(letter)
            if let outcome, DeadReasonGroup.outcome(of: view) != outcome { return false }
            if let host, view.host != host { return false }
            return true
        }
        let selected = rewrite.map { rewrite in
            group.filter(rewrite.applies)
        } ?? group
        let verb = retrying ? "Retry" : "Purge"
        let what = [outcome.map { "whose last outcome is \($0)" }, host.map { "sent to \($0)" }].compactMap { $0 }.joined(separator: ", ")
        let path = "/queues/\(HTML.segment(queue))/dead/\(retrying ? "retry" : "purge")"
        guard form["confirm"] == "yes" else {
            var fields = ["confirm": "yes"]
            fields["outcome"] = outcome
            fields["host"] = host
            fields["rewrite_from"] = rewrite?.prefix
            fields["rewrite_to"] = rewrite?.replacement
            let at = rewrite.map { " at \(HTML.escape($0.replacement))…" } ?? ""
            var body = """
                <h1>\(verb) \(selected.count) dead letter\(selected.count == 1 ? "" : "s") of \(HTML.escape(queue))\(at)?</h1>
                <p>\(retrying ? "They go back to pending, due now, attempts from zero." : "They are removed for good.")\
                \(what.isEmpty ? "" : " Only those " + HTML.escape(what) + ".")</p>
                """
            if let rewrite {
                let leftDead = group.count - selected.count
                body += """
                    <p id="rewrite">Their URLs start with <code>\(HTML.escape(rewrite.prefix))</code>; that part becomes \
                    <code>\(HTML.escape(rewrite.replacement))</code> (method, headers, body and idempotency key kept).\
                    \(leftDead == 0 ? "" : " \(leftDead) of the group \(leftDead == 1 ? "does not start with it and stays" : "do not start with it and stay") dead.")</p>
                    """
            }
            body += """
                <p>\(button("\(verb) \(selected.count)\(rewrite == nil ? "" : " at the new URL")", path, style: retrying ? "primary" : "danger", fields: fields))
                <a href="\(HTML.escape(basePath))/">Cancel</a></p>
                """
            if retrying && rewrite == nil {
                body += rewriteForm(path, outcome: outcome, host: host, example: group.first)
            }
            return html("Confirm", body)
        }
        var done = 0
        for letter in selected {
            if retrying {
                do {
                    if let rewrite {
                        _ = try await store.retryDeadLetter(letter, rewrittenBy: rewrite, now: now)
                    } else {
                        try await store.retryDeadLetter(letter.id, now: now)
                    }
                    done += 1
                } catch let error as OfflineStoreError where error.kind == .notFound {
                    continue  // retried or removed meanwhile
                }
            } else if try await store.remove(letter.id, unlessLeasedAt: now) == .removed {
                done += 1
            }
        }
        let at = rewrite.map { " at \($0.replacement)…" } ?? ""
        return redirect("/", flash: "\(done) dead letter\(done == 1 ? "" : "s") of \(queue) \(retrying ? "back to pending\(at)" : "purged").")
    }

    /// "Retry at a new URL": the prefix to replace (the example's scheme and host, to start from)
    /// and its replacement, posted back to the confirmation.
    func rewriteForm(_ path: String, outcome: String?, host: String?, example: OfflineEntry?) -> String {
        var hidden = ""
        for (name, value) in [("outcome", outcome), ("host", host)] {
            if let value { hidden += "<input type=\"hidden\" name=\"\(name)\" value=\"\(HTML.escape(value))\">" }
        }
        let start = example.map(EntryView.init).map { view -> String in
            guard let schemeEnd = view.url.range(of: "://") else { return "" }
            return view.url[..<schemeEnd.upperBound] + view.host
        } ?? ""
        return """
            <h2>Or retry at a new URL</h2>
            <form id="rewrite-form" method="post" action="\(HTML.escape(basePath + path))">\(csrfField)\(hidden)\
            <label>URLs starting with <input type="text" name="rewrite_from" size="50" value="\(HTML.escape(start))"></label>
            <label>go to <input type="text" name="rewrite_to" size="50" placeholder="https://new.example/path"></label>
            <button type="submit" class="primary">Retry at the new URL…</button></form>
            """
    }
}

/// The messages the console's changes report, kept on the server by a random reference (the
/// last 256: an old reference shows nothing).
final class Flashes: Sendable {
    private struct State {
        var messages: [String: String] = [:]
        var order: [String] = []
    }
    private let state = Mutex(State())

    /// Keeps `message`; returns its reference.
    func keep(_ message: String) -> String {
        let reference = QueueConsole.randomHex(16)
        state.withLock { state in
            state.messages[reference] = message
            state.order.append(reference)
            if state.order.count > 256 { state.messages[state.order.removeFirst()] = nil }
        }
        return reference
    }

    /// The message kept under `reference`, if it is still kept.
    func message(_ reference: String) -> String? {
        state.withLock { $0.messages[reference] }
    }
}

/// Set once, read by the live-update loop between its writes.
final class StopFlag: Sendable {
    private let stopped = Atomic(false)
    var isStopped: Bool { stopped.load(ordering: .relaxed) }
    func stop() { stopped.store(true, ordering: .relaxed) }
}
