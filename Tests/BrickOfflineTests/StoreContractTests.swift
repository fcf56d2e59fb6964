import BrickOfflineTestSupport
import BrickOffline
import Foundation
import Testing

/// What every ``OfflineStore`` promises, checked on SQLite and on PostgreSQL alike: claims, fencing
/// by token, the in-flight cap, strict head-of-line leases, dedupe, dead letters, pauses.
@Suite("The store contract, on both stores", .timeLimit(.minutes(3)))
struct StoreContractTests {
    /// A lease that must stay live through a test on the wall clock: an hour. A loaded whole run
    /// starved one of these tests for over a minute between two of its statements, and 60 s
    /// leases lapsed in the middle of it (the cap test leased its second entry again).
    static let liveLease: Duration = .seconds(3600)

    static func drafts(_ count: Int, queue: String = "q", notBefore: Date? = nil) -> [OfflineEntry.Draft] {
        (0..<count).map { index in
            OfflineEntry.Draft(queue: queue, payload: Data("entry \(index)".utf8), createdAt: Date(), notBefore: notBefore)
        }
    }

    @Test("leases go oldest first, in batches; a leased entry is not leased again until its lease lapses", arguments: StoreKind.allCases)
    func batches(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            let ids = try await store.add(Self.drafts(5), dedupe: .reject)
            let first = try await store.lease(queue: "q", limit: 2, now: Date(), for: Self.liveLease)
            #expect(first.map(\.id) == Array(ids[0..<2]))
            let second = try await store.lease(queue: "q", limit: 10, now: Date(), for: Self.liveLease)
            #expect(second.map(\.id) == Array(ids[2..<5]))
            #expect(try await store.lease(queue: "q", limit: 10, now: Date(), for: Self.liveLease).isEmpty)
            #expect(try await store.count(queue: "q") == 5)
            #expect(Set(first.compactMap(\.lease?.token)).count == 1)
        }
    }

    @Test("an operator's removal never takes a leased entry; a dead letter and an unleased entry go; pauses are kept per queue", arguments: StoreKind.allCases)
    func operatorSide(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try #require(try await place.open("q") as? any InspectableOfflineStore)
            let ids = try await store.add(Self.drafts(3), dedupe: .reject)
            let leased = try #require(try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease).first)
            #expect(leased.id == ids[0])
            guard case .leased(let until) = try await store.remove(ids[0], unlessLeasedAt: Date()) else {
                Issue.record("a leased entry was not refused")
                return
            }
            #expect(until > Date())
            #expect(try await store.list(queue: "q").map(\.id) == ids, "the worker's entry is still there")
            #expect(try await store.remove(ids[1], unlessLeasedAt: Date()) == .removed)
            try await store.setAside([ids[2]], reason: "operator test", now: Date())
            #expect(try await store.remove(ids[2], unlessLeasedAt: Date()) == .removed, "a dead letter goes")
            #expect(try await store.remove(ids[1], unlessLeasedAt: Date()) == .notFound)
            #expect(try await store.queueNames() == ["q"])

            #expect(try await store.isPaused(queue: "q") == false)
            try await store.setPaused(true, queue: "q")
            try await store.setPaused(true, queue: "q")  // idempotent
            #expect(try await store.isPaused(queue: "q"))
            #expect(try await store.isPaused(queue: "other") == false)
            #expect(try await store.pausedQueues().keys.sorted() == ["q"])
            try await store.setPaused(false, queue: "q")
            #expect(try await store.isPaused(queue: "q") == false)
            #expect(try await store.pausedQueues().isEmpty)
        }
    }

    @Test("the operator's survey: counts in one query, keyset pages (pending in order, dead letters in death order), an entry by ID, attempts counted per minute once each and only under the lease", arguments: StoreKind.allCases)
    func survey(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try #require(try await place.open("q") as? any InspectableOfflineStore)
            let later = Date().addingTimeInterval(3600)
            let ids = try await store.add(Self.drafts(7), dedupe: .reject)
            _ = try await store.add(Self.drafts(2, notBefore: later), dedupe: .reject)
            let leased = try await store.lease(queue: "q", limit: 4, now: Date(), for: Self.liveLease)
            #expect(leased.map(\.id) == Array(ids[0..<4]))
            let tokens = leased.compactMap(\.lease?.token)
            let failure = OfflineEntry.AttemptRecord(date: Date(), status: 503, error: nil)
            #expect(try await store.complete(ids[0], lease: tokens[0]))
            #expect(try await store.reschedule(ids[1], lease: tokens[1], notBefore: later, attempt: failure, countsAttempt: true))
            #expect(try await store.bury(ids[2], lease: tokens[2], reason: "gone", attempt: failure, countsAttempt: true))
            // Not counted: a stale token changes nothing; an attempt that does not count is not a failure.
            #expect(try await store.complete(ids[1], lease: UUID()) == false)
            try await store.setAside([ids[4]], reason: "by hand", now: Date())
            try await store.setPaused(true, queue: "idle")

            let counts = try await store.counts(at: Date())
            #expect(counts.map(\.queue) == ["idle", "q"])
            let q = try #require(counts.last)
            // Pending: ids 1, 3, 5, 6 and the two for later; leased: id 3; due: 5 and 6.
            #expect((q.pending, q.leased, q.due, q.dead) == (6, 1, 2, 2), "\(q)")
            #expect(q.oldestPendingAt != nil && q.pausedSince == nil)
            #expect(counts.first?.pausedSince != nil && counts.first?.pending == 0)

            let first = try await store.page(queue: "q", dead: false, after: nil, limit: 3)
            #expect(first.map(\.id) == [ids[1], ids[3], ids[5]])
            let second = try await store.page(queue: "q", dead: false, after: first.last!.id, limit: 3)
            #expect(second.count == 3 && second.first?.id == ids[6])
            #expect(try await store.page(queue: "q", dead: false, after: second.last!.id, limit: 3).isEmpty)
            let dead = try await store.page(queue: "q", dead: true, after: nil, limit: 10)
            #expect(dead.map(\.id) == [ids[2], ids[4]])
            #expect(try await store.page(queue: "q", dead: true, after: ids[2], limit: 10).map(\.id) == [ids[4]])
            #expect(try await store.page(queue: "q", dead: true, after: ids[1], limit: 10).isEmpty, "a pending ID does not page the dead letters")

            #expect(try await store.entry(ids[2])?.deadLetter?.reason == "gone")
            #expect(try await store.entry(ids[0]) == nil)

            let minutes = try await store.deliveries(since: Date().addingTimeInterval(-3600))
            // One row per minute: two when the test ran across a minute's end.
            #expect(Set(minutes.map(\.queue)) == ["q"])
            #expect(minutes.reduce(0) { $0 + $1.delivered } == 1)
            #expect(minutes.reduce(0) { $0 + $1.failed } == 2)
            #expect(try await store.deliveries(since: Date().addingTimeInterval(120)).isEmpty)
        }
    }

    @Test("complete, reschedule, bury and extend need the current token: a stale worker changes nothing", arguments: StoreKind.allCases)
    func fencing(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            let ids = try await store.add(Self.drafts(1), dedupe: .reject)
            // A short lease that lapses; another worker takes the entry with a new token.
            let stale = try #require(try await store.lease(queue: "q", limit: 1, now: Date(), for: .milliseconds(50)).first)
            var fresh: OfflineEntry?
            let deadline = ContinuousClock.now + .seconds(30)
            while fresh == nil && ContinuousClock.now < deadline {
                fresh = try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease).first
                if fresh == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            let holder = try #require(fresh)
            #expect(holder.id == ids[0])
            let staleToken = try #require(stale.lease?.token)
            let record = OfflineEntry.AttemptRecord(date: Date(), status: 500, error: "stale")
            #expect(try await store.extend(ids[0], lease: staleToken, until: Date().addingTimeInterval(60)) == false)
            #expect(try await store.reschedule(ids[0], lease: staleToken, notBefore: Date(), attempt: record, countsAttempt: true) == false)
            #expect(try await store.bury(ids[0], lease: staleToken, reason: "stale", attempt: record, countsAttempt: true) == false)
            #expect(try await store.complete(ids[0], lease: staleToken) == false)
            let entry = try #require(try await store.list(queue: "q").first)
            #expect(entry.attempts == 0 && entry.lastAttempt == nil && entry.lease?.token == holder.lease?.token)
            #expect(try await store.deadLetters(queue: "q").isEmpty)
            // The holder's writes apply.
            let token = try #require(holder.lease?.token)
            #expect(try await store.extend(ids[0], lease: token, until: Date().addingTimeInterval(60)))
            #expect(try await store.complete(ids[0], lease: token))
            #expect(try await store.count(queue: "q") == 0)
        }
    }

    @Test("the cap bounds live leases of a queue, whoever holds them; a finished entry frees its place", arguments: StoreKind.allCases)
    func cap(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            _ = try await store.add(Self.drafts(6), dedupe: .reject)
            let a = try await store.lease(queue: "q", limit: 10, cap: 2, now: Date(), for: Self.liveLease)
            #expect(a.count == 2)
            #expect(try await store.lease(queue: "q", limit: 10, cap: 2, now: Date(), for: Self.liveLease).isEmpty)
            #expect(try await store.complete(a[0].id, lease: try #require(a[0].lease?.token)))
            let b = try await store.lease(queue: "q", limit: 10, cap: 2, now: Date(), for: Self.liveLease)
            #expect(b.map(\.sequence) == [a[1].sequence + 1])
        }
    }

    @Test("leaseHead leases only the oldest pending entry, and nothing while it is paused or leased", arguments: StoreKind.allCases)
    func head(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            let ids = try await store.add(Self.drafts(2), dedupe: .reject)
            let head = try #require(try await store.leaseHead(queue: "q", now: Date(), for: Self.liveLease))
            #expect(head.id == ids[0])
            #expect(try await store.leaseHead(queue: "q", now: Date(), for: Self.liveLease) == nil)
            let record = OfflineEntry.AttemptRecord(date: Date(), status: nil, error: "offline")
            let later = Date().addingTimeInterval(3600)
            #expect(try await store.reschedule(ids[0], lease: try #require(head.lease?.token), notBefore: later, attempt: record, countsAttempt: false))
            #expect(try await store.leaseHead(queue: "q", now: Date(), for: Self.liveLease) == nil)
            #expect(try await store.nextDue(queue: "q") != nil)
            try await store.clearPauses(queue: "q", now: Date())
            #expect(try await store.leaseHead(queue: "q", now: Date(), for: Self.liveLease)?.id == ids[0])
        }
    }

    @Test("nextHeadDue is when the head may be leased (its pause, its lease), though a later entry is due now; nextDue is any entry's", arguments: StoreKind.allCases)
    func nextHeadDue(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            #expect(try await store.nextHeadDue(queue: "q") == nil)
            let now = Date()
            let later = now.addingTimeInterval(600)
            _ = try await store.add(Self.drafts(1, notBefore: later), dedupe: .reject)
            _ = try await store.add(Self.drafts(1, notBefore: now), dedupe: .reject)
            #expect(try await store.leaseHead(queue: "q", now: now, for: .seconds(60)) == nil)
            let head = try #require(try await store.nextHeadDue(queue: "q"))
            #expect(abs(head.timeIntervalSince(later)) < 0.01, "the head's pause, not the second entry's date")
            let any = try #require(try await store.nextDue(queue: "q"))
            #expect(abs(any.timeIntervalSince(now)) < 0.01)
            // Once due and leased, the head waits for its lease.
            let leased = try #require(try await store.leaseHead(queue: "q", now: later, for: .seconds(60)))
            let held = try #require(try await store.nextHeadDue(queue: "q"))
            #expect(held >= (leased.lease?.expiresAt ?? .distantFuture).addingTimeInterval(-0.01))
        }
    }

    @Test("dedupe: reject refuses, replace takes the pending one's place; a leased one is never replaced", arguments: StoreKind.allCases)
    func dedupe(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            func draft(_ text: String) -> OfflineEntry.Draft {
                OfflineEntry.Draft(queue: "q", payload: Data(text.utf8), dedupeKey: "k", createdAt: Date())
            }
            _ = try await store.add([draft("one")], dedupe: .reject)
            await #expect(throws: OfflineStoreError.self) { _ = try await store.add([draft("two")], dedupe: .reject) }
            let replaced = try await store.add([draft("three")], dedupe: .replace)
            #expect(try await store.list(queue: "q").map(\.id) == replaced)
            _ = try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease)
            do {
                _ = try await store.add([draft("four")], dedupe: .replace)
                Issue.record("a leased entry was replaced")
            } catch let error as OfflineStoreError {
                #expect(error.kind == .duplicate)
            }
        }
    }

    @Test("concurrent adds: a refused batch refuses only itself; every other batch is written once", arguments: StoreKind.allCases)
    func refusalAmongConcurrentAdds(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            _ = try await store.add(
                [OfflineEntry.Draft(queue: "q", payload: Data("taken".utf8), dedupeKey: "taken", createdAt: Date())],
                dedupe: .reject
            )
            // 20 rounds of 16 adds at once (a group commit takes several together), two of each
            // round refused.
            var written: Set<OfflineEntry.ID> = []
            for round in 0..<20 {
                let outcomes = await withTaskGroup(of: Result<[OfflineEntry.ID], any Error>.self) { group in
                    for index in 0..<16 {
                        group.addTask {
                            let key = index % 8 == 0 ? "taken" : "r\(round)-\(index)"
                            let drafts = (0..<2).map { part in
                                OfflineEntry.Draft(
                                    queue: "q",
                                    payload: Data("\(round)-\(index)-\(part)".utf8),
                                    dedupeKey: part == 0 ? key : nil,
                                    createdAt: Date()
                                )
                            }
                            do { return .success(try await store.add(drafts, dedupe: .reject)) } catch { return .failure(error) }
                        }
                    }
                    var all: [Result<[OfflineEntry.ID], any Error>] = []
                    for await outcome in group { all.append(outcome) }
                    return all
                }
                let refused = outcomes.filter { if case .failure = $0 { return true } else { return false } }
                #expect(refused.count == 2, "round \(round)")
                for case .failure(let error) in outcomes {
                    #expect((error as? OfflineStoreError)?.kind == .duplicate, "\(error)")
                }
                for case .success(let ids) in outcomes { written.formUnion(ids) }
            }
            #expect(written.count == 20 * 14 * 2)
            let stored = try await store.list(queue: "q")
            #expect(stored.count == 1 + 20 * 14 * 2)
            #expect(Set(stored.map(\.id)).isSuperset(of: written))
        }
    }

    @Test("replacePending puts the new entries where the first replaced one was", arguments: StoreKind.allCases)
    func replace(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            let ids = try await store.add(Self.drafts(4), dedupe: .reject)
            let merged = OfflineEntry.Draft(queue: "q", payload: Data("merged".utf8), createdAt: Date())
            #expect(try await store.replacePending(queue: "q", ids: [ids[1], ids[2]], with: [merged]))
            #expect(try await store.list(queue: "q").map(\.id) == [ids[0], merged.id, ids[3]])
            _ = try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease)
            let other = OfflineEntry.Draft(queue: "q", payload: Data("x".utf8), createdAt: Date())
            #expect(try await store.replacePending(queue: "q", ids: [ids[0]], with: [other]) == false)
        }
    }

    @Test("a buried entry is a dead letter with its reason; retried, it is pending again at the end with attempts from zero", arguments: StoreKind.allCases)
    func deadLetters(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            let ids = try await store.add(Self.drafts(2), dedupe: .reject)
            let leased = try #require(try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease).first)
            let record = OfflineEntry.AttemptRecord(date: Date(), status: 410, error: "status 410")
            #expect(try await store.bury(leased.id, lease: try #require(leased.lease?.token), reason: "gone", attempt: record, countsAttempt: true))
            let dead = try await store.deadLetters(queue: "q")
            #expect(dead.map(\.id) == [ids[0]])
            #expect(dead.first?.deadLetter?.reason == "gone" && dead.first?.attempts == 1 && dead.first?.lastAttempt?.status == 410)
            #expect(try await store.count(queue: "q") == 1)
            try await store.retryDeadLetter(ids[0], now: Date())
            #expect(try await store.list(queue: "q").map(\.id) == [ids[1], ids[0]])
            #expect(try await store.list(queue: "q").last?.attempts == 0)
            await #expect(throws: OfflineStoreError.self) { try await store.retryDeadLetter(UUID(), now: Date()) }
            try await store.setAside([ids[1]], reason: "stale", now: Date())
            #expect(try await store.deadLetters(queue: "q").map(\.id) == [ids[1]])
            try await store.remove(ids[1])
            try await store.removeAll(queue: "q")
            #expect(try await store.count(queue: "q") == 0)
            #expect(try await store.deadLetters(queue: "q").isEmpty)
        }
    }

    @Test("extend(leases:) extends every lease still held, in one call, and names the ones lost", arguments: StoreKind.allCases)
    func extendMany(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            _ = try await store.add(Self.drafts(3), dedupe: .reject)
            let now = Date()
            let leased = try await store.lease(queue: "q", limit: 3, now: now, for: .seconds(30))
            #expect(leased.count == 3)
            var leases = Dictionary(uniqueKeysWithValues: leased.compactMap { entry in entry.lease.map { (entry.id, $0.token) } })
            leases[leased[2].id] = UUID()  // a token it does not hold: a lease lost
            #expect(try await store.extend(leases: leases, for: .seconds(3600), now: now) == [leased[2].id])
            let expiries = Dictionary(uniqueKeysWithValues: try await store.list(queue: "q").compactMap { entry in
                entry.lease.map { (entry.id, $0.expiresAt) }
            })
            for entry in leased.prefix(2) {
                #expect(try #require(expiries[entry.id]) > now.addingTimeInterval(3000), "extended to an hour")
            }
            #expect(try #require(expiries[leased[2].id]) < now.addingTimeInterval(60), "the lost one is left as it was")
            #expect(try await store.extend(leases: [:], for: .seconds(60), now: now).isEmpty)
        }
    }

    @Test("a dead letter retried with its payload replaced: only while its payload is the one read (else nothing changes); then pending, due, attempts from zero, with the new payload", arguments: StoreKind.allCases)
    func retryReplacingPayload(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try #require(try await place.open("q") as? any InspectableOfflineStore)
            let id = try #require(try await store.add(Self.drafts(1), dedupe: .reject).first)
            let leased = try #require(try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease).first)
            _ = try await store.bury(leased.id, lease: try #require(leased.lease?.token), reason: "gone", attempt: nil, countsAttempt: true)
            let dead = try #require(try await store.entry(id))
            let moved = Data("moved".utf8)
            await #expect(throws: OfflineStoreError.self) {
                try await store.retryDeadLetter(id, replacingPayload: Data("not what was read".utf8), with: moved, now: Date())
            }
            #expect(try await store.entry(id) == dead, "a stale read changes nothing")
            try await store.retryDeadLetter(id, replacingPayload: dead.payload, with: moved, now: Date())
            let pending = try #require(try await store.list(queue: "q").first)
            #expect(pending.id == id && pending.payload == moved && pending.attempts == 0 && pending.deadLetter == nil)
            #expect(pending.idempotencyKey == dead.idempotencyKey)
            await #expect(throws: OfflineStoreError.self, "no longer a dead letter") {
                try await store.retryDeadLetter(id, replacingPayload: moved, with: dead.payload, now: Date())
            }
        }
    }

    @Test("clearPauses makes paused entries due, not scheduled ones", arguments: StoreKind.allCases)
    func pauses(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("q")
            let later = Date().addingTimeInterval(3600)
            let ids = try await store.add(Self.drafts(1) + Self.drafts(1, notBefore: later), dedupe: .reject)
            let leased = try #require(try await store.lease(queue: "q", limit: 1, now: Date(), for: Self.liveLease).first)
            let record = OfflineEntry.AttemptRecord(date: Date(), status: 503, error: "status 503")
            _ = try await store.reschedule(leased.id, lease: try #require(leased.lease?.token), notBefore: later, attempt: record, countsAttempt: true)
            #expect(try await store.lease(queue: "q", limit: 5, now: Date(), for: Self.liveLease).isEmpty)
            try await store.clearPauses(queue: "q", now: Date())
            #expect(try await store.lease(queue: "q", limit: 5, now: Date(), for: Self.liveLease).map(\.id) == [ids[0]])
        }
    }
}
