import ArgumentParser
import BrickOfflineCore
import BrickRequest
import BrickQueueConsole
import Foundation

/// `status`: every queue's depth, what is due, leased and dead, and the oldest pending entry's age.
struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Every queue: pending, due now, leased, dead, oldest pending age."
    )
    @ParentCommand var root: BrickQueue

    @Flag(help: "The dead letters grouped by host and last outcome, instead of the counts.")
    var deadReasons = false

    func run() async throws {
        let now = Date()
        if deadReasons { return try await showDeadReasons() }
        let summaries = try await root.withStore { store in
            try await QueueSummary.all(in: store, now: now)
        }
        if root.json {
            for summary in summaries { Output.line(summary.json) }
        } else if summaries.isEmpty {
            print("no queue holds an entry")
        } else {
            Output.table(
                ["QUEUE", "PENDING", "DUE", "LEASED", "DEAD", "OLDEST PENDING", "DELIVERED 1M/1H", "FAILED 1M/1H", "STATE"],
                summaries.map {
                    [$0.queue, "\($0.pending)", "\($0.due)", "\($0.leased)", "\($0.dead)",
                     $0.oldestPendingSeconds.map(Output.age) ?? "-",
                     "\($0.deliveredLastMinute)/\($0.deliveredLastHour)", "\($0.failedLastMinute)/\($0.failedLastHour)",
                     ($0.pausedSince.map { "paused since \(Output.date($0))" } ?? "running")
                        + ($0.leasedBy.isEmpty ? "" : "; leased by " + $0.leasedBy.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value))" }.joined(separator: ", "))]
                }
            )
        }
    }
}

extension Status {
    /// "412 × HTTP 401 from api.partner.com, first …, last …", per queue, largest group first.
    func showDeadReasons() async throws {
        let groups = try await root.withStore { store in
            var groups: [DeadReasonGroup] = []
            for name in try await store.queueNames() {
                groups += DeadReasonGroup.groups(try await store.deadLetters(queue: name).map(EntryView.init))
            }
            return groups
        }
        if root.json {
            for group in groups { Output.line(group.json) }
        } else if groups.isEmpty {
            print("no dead letter in any queue")
        } else {
            for group in groups {
                print("\(group.queue): \(group.count) × \(group.outcome) from \(group.host), first \(Output.date(group.first)), last \(Output.date(group.last))")
            }
        }
    }
}

/// `list QUEUE`: a queue's pending entries (or its dead letters), oldest first, paged.
struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "A queue's entries, or its dead letters, oldest first.")
    @ParentCommand var root: BrickQueue

    @Argument(help: "The queue.") var queue: String
    @Flag(help: "The dead letters instead of the pending entries.") var dead = false
    @Option(help: "At most this many entries.") var limit = 100
    @Option(help: ArgumentHelp("Start after this entry (the last ID of the previous page).", valueName: "id"))
    var after: String?

    func validate() throws {
        guard limit > 0 else { throw ValidationError("--limit must be at least 1") }
        if let after, UUID(uuidString: after) == nil { throw ValidationError("--after takes an entry ID") }
    }

    func run() async throws {
        let (dead, queue, limit) = (self.dead, self.queue, self.limit)
        let after = self.after.flatMap(UUID.init(uuidString:))
        let entries = try await root.withStore { store in
            if let after, try await store.entry(after).map({ $0.queue != queue || ($0.deadLetter != nil) != dead }) ?? true {
                throw Refusal("no entry \(after) in \(dead ? "the dead letters of " : "")\(queue)")
            }
            // One more than the page: whether there is a next one.
            return try await store.page(queue: queue, dead: dead, after: after, limit: limit == .max ? limit : limit + 1)
        }
        let page = entries.prefix(limit).map(EntryView.init)
        if root.json {
            for entry in page { Output.line(entry.json(body: false)) }
        } else if page.isEmpty {
            print(dead ? "no dead letter in \(queue)" : "nothing pending in \(queue)")
        } else {
            Output.table(
                ["ID", "CREATED", "ATTEMPTS", dead ? "DIED" : "NEXT ATTEMPT", "REQUEST", dead ? "REASON" : "LAST"],
                page.map {
                    [$0.entry.id.uuidString, Output.date($0.entry.createdAt), "\($0.entry.attempts)",
                     Output.date(dead ? $0.entry.deadLetter?.date ?? $0.entry.notBefore : $0.entry.notBefore),
                     "\($0.method) \($0.url)", dead ? $0.entry.deadLetter?.reason ?? "" : $0.lastOutcome]
                }
            )
            if entries.count > limit { print("… more: --after \(page.last!.entry.id.uuidString)") }
        }
    }
}

/// `show ID`: everything stored about one entry, credentials never (they are never stored).
struct Show: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Everything stored about one entry.")
    @ParentCommand var root: BrickQueue

    @Argument(help: "The entry's ID.") var id: String
    @Flag(help: "Include the request body (at most 64 KiB: text, or hex when it is not UTF-8).") var body = false

    func validate() throws {
        if UUID(uuidString: id) == nil { throw ValidationError("\(id) is not an entry ID") }
    }

    func run() async throws {
        let id = UUID(uuidString: self.id)!
        let found = try await root.withStore { store in try await Lookup.entry(id, in: store) }
        guard let entry = found else { throw Refusal("no entry \(id) in any queue") }
        let view = EntryView(entry)
        if root.json {
            Output.line(view.json(body: body))
            return
        }
        var lines: [(String, String)] = [
            ("id", entry.id.uuidString), ("queue", entry.queue), ("request", "\(view.method) \(view.url)"),
            ("created", Output.date(entry.createdAt)), ("attempts", "\(entry.attempts)" + (entry.maxAttempts.map { " of \($0)" } ?? "")),
            ("next attempt", Output.date(entry.notBefore)), ("idempotency key", entry.idempotencyKey),
        ]
        if let key = entry.dedupeKey { lines.append(("dedupe key", key)) }
        if let expiry = entry.expiresAt { lines.append(("expires", Output.date(expiry))) }
        if let lease = entry.lease {
            lines.append(("leased until", Output.date(lease.expiresAt) + (lease.owner.map { " by \($0)" } ?? "")))
        }
        if let last = entry.lastAttempt { lines.append(("last attempt", "\(Output.date(last.date)) \(view.lastOutcome)")) }
        if let dead = entry.deadLetter { lines.append(("dead since", "\(Output.date(dead.date)): \(dead.reason)")) }
        for header in view.headers { lines.append(("header", "\(header.name): \(header.value)")) }
        let width = lines.map(\.0.count).max() ?? 0
        for (name, value) in lines { print(name.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + value) }
        if body, let text = view.bodyText ?? view.bodyHex { print("\n" + text) }
    }
}

/// `retry`: dead letters back to pending, due now.
struct Retry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Put dead letters back: pending, due now, attempts from zero.",
        discussion: """
            brick-queue retry ID…   or   brick-queue retry --dead QUEUE --all [--older-than 1h] [--outcome 'HTTP 401'] [--host api.partner.com]

            --rewrite-url OLD=NEW sends them to a new address: a dead letter whose URL starts with \
            OLD goes back with that prefix replaced by NEW (method, headers, body and idempotency key \
            kept). With --dead QUEUE --all it selects those that start with OLD and leaves the rest \
            dead; a given ID that does not start with OLD is refused.
            """
    )
    @ParentCommand var root: BrickQueue

    @Argument(help: "Dead letters' IDs.") var ids: [String] = []
    @Option(help: ArgumentHelp("Every dead letter of this queue (with --all).", valueName: "queue")) var dead: String?
    @Flag(help: "With --dead: every dead letter of the queue.") var all = false
    @OptionGroup var selection: DeadLetterSelection
    @Flag(name: .customLong("dry-run"), help: "Say what would be put back (and how many), change nothing.") var dryRun = false
    @Option(
        name: .customLong("rewrite-url"),
        help: ArgumentHelp("Send them to a new address: a URL prefix and its replacement.", valueName: "old=new"),
        transform: { text in
            do throws(BrickError) { return try URLRewrite(parsing: text) } catch { throw ValidationError(error.message) }
        }
    )
    var rewrite: URLRewrite?

    func validate() throws {
        if ids.isEmpty == (dead == nil) { throw ValidationError("give dead letters' IDs, or --dead QUEUE --all") }
        if dead != nil && !all { throw ValidationError("--dead QUEUE needs --all (every dead letter of the queue)") }
        if selection.isNarrowing && dead == nil {
            throw ValidationError("--older-than, --outcome and --host go with --dead QUEUE --all")
        }
        for id in ids where UUID(uuidString: id) == nil { throw ValidationError("\(id) is not an entry ID") }
    }

    func run() async throws {
        let now = Date()
        let ids = self.ids.compactMap(UUID.init(uuidString:))
        let (queue, selection, dryRun, rewrite) = (dead, self.selection, self.dryRun, self.rewrite)
        let outcome = try await root.withStore(changing: !dryRun) { store -> RetryOutcome in
            var outcome = RetryOutcome()
            if let queue {
                for entry in try await store.deadLetters(queue: queue) where selection.selects(entry, now: now) {
                    if let rewrite, !rewrite.applies(to: entry) {
                        outcome.leftDead += 1
                        continue
                    }
                    try await outcome.retry(entry, rewrite: rewrite, in: store, dryRun: dryRun, now: now)
                }
                return outcome
            }
            for id in ids {
                let entry = try await Lookup.entry(id, in: store)
                guard let entry, entry.deadLetter != nil else {
                    outcome.refused.append(entry == nil ? "no entry \(id)" : "\(id) is pending, not a dead letter: its queue retries it")
                    continue
                }
                do {
                    try await outcome.retry(entry, rewrite: rewrite, in: store, dryRun: dryRun, now: now)
                } catch let error as BrickError {
                    outcome.refused.append("\(id): \(error.message)")
                } catch let error as OfflineStoreError where error.kind == .notFound {
                    outcome.refused.append("\(id) is no longer a dead letter (retried or removed meanwhile)")
                }
            }
            return outcome
        }
        let retried = outcome.retried
        if root.json {
            for (id, url) in retried {
                var line: [String: Any] = dryRun ? ["id": id.uuidString, "wouldRetry": true] : ["id": id.uuidString, "retried": true]
                if let url { line["url"] = url }
                Output.line(line)
            }
        } else if dryRun {
            print("dry run: \(retried.count) dead letter\(retried.count == 1 ? "" : "s") would go back to pending\(rewrite.map { " at \($0.replacement)…" } ?? ""); nothing changed")
        } else {
            print(retried.isEmpty ? "no dead letter retried" : "\(retried.count) dead letter\(retried.count == 1 ? "" : "s") back to pending, due now\(rewrite.map { " at \($0.replacement)…" } ?? "")")
        }
        if outcome.leftDead > 0, let rewrite {
            let count = outcome.leftDead
            FileHandle.standardError.write(Data("\(count) dead letter\(count == 1 ? "" : "s") of the selection left dead: \(count == 1 ? "its URL does" : "their URLs do") not start with \(rewrite.prefix)\n".utf8))
        }
        if !outcome.refused.isEmpty { throw Refusal(outcome.refused.joined(separator: "; ")) }
    }
}

/// What `retry` did (or would do): the entries put back (with their new URL, redacted, when
/// rewritten), those a rewrite's prefix left dead, the refusals.
struct RetryOutcome: Sendable {
    var retried: [(UUID, String?)] = []
    var leftDead = 0
    var refused: [String] = []

    mutating func retry(_ entry: OfflineEntry, rewrite: URLRewrite?, in store: any InspectableOfflineStore, dryRun: Bool, now: Date) async throws {
        guard let rewrite else {
            if !dryRun { try await store.retryDeadLetter(entry.id, now: now) }
            retried.append((entry.id, nil))
            return
        }
        // The rewritten request is checked before anything changes (a dry run checks it too).
        let request = dryRun ? try rewrite.apply(to: entry).request : try await store.retryDeadLetter(entry, rewrittenBy: rewrite, now: now)
        retried.append((entry.id, request.redactedURL))
    }
}

/// What a removal would do, for `--dry-run`: as `remove(_:unlessLeasedAt:)` decides, without it.
enum Removals {
    static func would(_ entry: OfflineEntry?, now: Date) -> OfflineEntry.Removal {
        guard let entry else { return .notFound }
        if let lease = entry.lease, lease.expiresAt > now { return .leased(until: lease.expiresAt) }
        return .removed
    }
}

/// Finds an entry, pending or dead, by ID in every queue of a store.
enum Lookup {
    static func entry(_ id: UUID, in store: any InspectableOfflineStore) async throws -> OfflineEntry? {
        try await store.entry(id)
    }
}

/// `remove ID…`: entries gone, pending or dead — never one a worker holds.
struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove entries, pending or dead; an entry under a worker's lease is left to it (exit 1)."
    )
    @ParentCommand var root: BrickQueue

    @Argument(help: "The entries' IDs.") var ids: [String]
    @Flag(name: .customLong("dry-run"), help: "Say what would be removed (and how many), change nothing.") var dryRun = false

    func validate() throws {
        if ids.isEmpty { throw ValidationError("give the IDs of the entries to remove") }
        for id in ids where UUID(uuidString: id) == nil { throw ValidationError("\(id) is not an entry ID") }
    }

    func run() async throws {
        let (ids, dryRun) = (self.ids.compactMap(UUID.init(uuidString:)), self.dryRun)
        let outcomes = try await root.withStore(changing: !dryRun) { store in
            var outcomes: [(UUID, OfflineEntry.Removal)] = []
            for id in ids {
                outcomes.append((id, dryRun ? Removals.would(try await Lookup.entry(id, in: store), now: Date()) : try await store.remove(id, unlessLeasedAt: Date())))
            }
            return outcomes
        }
        let removed = outcomes.filter { $0.1 == .removed }.map(\.0)
        if root.json {
            for id in removed { Output.line(dryRun ? ["id": id.uuidString, "wouldRemove": true] : ["id": id.uuidString, "removed": true]) }
        } else if dryRun {
            print("dry run: \(removed.count) entr\(removed.count == 1 ? "y" : "ies") would be removed; nothing changed")
        } else {
            print(removed.isEmpty ? "nothing removed" : "\(removed.count) entr\(removed.count == 1 ? "y" : "ies") removed")
        }
        let refused = outcomes.compactMap { id, outcome -> String? in
            switch outcome {
            case .removed: return nil
            case .notFound: return "no entry \(id)"
            case .leased(let until):
                return "\(id) is under a worker's lease until \(Output.date(until)): left to it (try again once its attempt ends)"
            }
        }
        if !refused.isEmpty { throw Refusal(refused.joined(separator: "; ")) }
    }
}

/// `purge --dead QUEUE`: a queue's dead letters gone, or those dead for longer than an age.
struct Purge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove a queue's dead letters: all, or those --older-than, --outcome, --host select."
    )
    @ParentCommand var root: BrickQueue

    @Option(help: ArgumentHelp("The queue whose dead letters go.", valueName: "queue")) var dead: String
    @OptionGroup var selection: DeadLetterSelection
    @Flag(name: .customLong("dry-run"), help: "Say what would be removed (and how many), change nothing.") var dryRun = false

    func run() async throws {
        let now = Date()
        let (queue, selection, dryRun) = (dead, self.selection, self.dryRun)
        let removed = try await root.withStore(changing: !dryRun) { store in
            var removed: [UUID] = []
            for entry in try await store.deadLetters(queue: queue) where selection.selects(entry, now: now) {
                let outcome = dryRun ? Removals.would(entry, now: now) : try await store.remove(entry.id, unlessLeasedAt: now)
                if outcome == .removed { removed.append(entry.id) }
            }
            return removed
        }
        if root.json {
            for id in removed { Output.line(dryRun ? ["id": id.uuidString, "wouldRemove": true] : ["id": id.uuidString, "removed": true]) }
        } else if dryRun {
            print("dry run: \(removed.count) dead letter\(removed.count == 1 ? "" : "s") of \(queue) would be removed; nothing changed")
        } else {
            print("\(removed.count) dead letter\(removed.count == 1 ? "" : "s") of \(queue) removed")
        }
    }
}

/// `pause QUEUE` / `resume QUEUE`: every worker stops claiming from the queue (attempts under way
/// finish) until it is resumed.
struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop every worker claiming from a queue (attempts under way finish) until it is resumed."
    )
    @ParentCommand var root: BrickQueue
    @Argument(help: "The queue.") var queue: String

    func run() async throws {
        let queue = self.queue
        try await root.withStore(changing: true) { store in try await store.setPaused(true, queue: queue) }
        if root.json { Output.line(["queue": queue, "paused": true]) } else { print("\(queue) paused: workers claim nothing from it until `brick-queue resume \(queue)`") }
    }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Let the workers claim from a paused queue again (they are woken at once on PostgreSQL).")
    @ParentCommand var root: BrickQueue
    @Argument(help: "The queue.") var queue: String

    func run() async throws {
        let queue = self.queue
        try await root.withStore(changing: true) { store in try await store.setPaused(false, queue: queue) }
        if root.json { Output.line(["queue": queue, "paused": false]) } else { print("\(queue) resumed") }
    }
}

/// Which dead letters of a queue a bulk `retry` or `purge` takes: by age, and by last outcome and
/// host as `status --dead-reasons` names them (one group at a time).
struct DeadLetterSelection: ParsableArguments {
    @Option(help: ArgumentHelp("Only those dead for longer than this (30s, 15m, 1h, 7d).", valueName: "age"))
    var olderThan: String?
    @Option(help: ArgumentHelp("Only those whose last outcome is this, as status --dead-reasons names it (\"HTTP 401\").", valueName: "outcome"))
    var outcome: String?
    @Option(help: ArgumentHelp("Only those sent to this host (host[:port], as status --dead-reasons names it).", valueName: "host"))
    var host: String?

    func validate() throws {
        if let olderThan, Output.seconds(olderThan) == nil {
            throw ValidationError("--older-than takes an age such as 30s, 15m, 1h or 7d")
        }
    }

    /// Whether any option narrows the selection.
    var isNarrowing: Bool { olderThan != nil || outcome != nil || host != nil }

    func selects(_ letter: OfflineEntry, now: Date) -> Bool {
        if let age = olderThan.flatMap(Output.seconds), (letter.deadLetter?.date ?? now) >= now.addingTimeInterval(-age) {
            return false
        }
        guard outcome != nil || host != nil else { return true }
        let view = EntryView(letter)
        if let outcome, DeadReasonGroup.outcome(of: view) != outcome { return false }
        if let host, view.host != host { return false }
        return true
    }
}
