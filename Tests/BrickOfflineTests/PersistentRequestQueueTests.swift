import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import GRDB
import Synchronization
import Testing

// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("PersistentRequestQueue against a real server, on SQLite and on PostgreSQL", .timeLimit(.minutes(3)))
struct PersistentRequestQueueTests {
    @Test("P1: a single request is delivered with its 200 and the queue empties", arguments: StoreKind.allCases)
    func single(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(name: "tasks", store: try await place.open("tasks"), session: session())
                let delivered = Lock<TransportResponse?>(nil)
                let id = try await queue.add(RecordSale(server.baseURL + "/post", amount: 12)) { result in
                    delivered.withLock { $0 = try? result.get() }
                }
                await queue.waitUntilEmpty()
                await eventually { delivered.withLock { $0 != nil } }
                #expect(await queue.count == 0)
                #expect(delivered.withLock { $0?.status } == .ok)
                let sent = try #require(server.requests(path: "/post").first)
                #expect(String(decoding: sent.body, as: UTF8.self) == "amount=12")
                // A POST carries the entry's idempotency key.
                #expect(sent.header("Idempotency-Key") != nil)
                _ = id
            }
        }
    }

    @Test("P2: A then B are delivered in that order", arguments: StoreKind.allCases)
    func order(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(name: "tasks", store: try await place.open("tasks"), session: session())
                for amount in 1...5 { try await queue.add(RecordSale(server.baseURL + "/post", amount: amount)) }
                await queue.waitUntilEmpty()
                let bodies = server.requests(path: "/post").map { String(decoding: $0.body, as: UTF8.self) }
                #expect(bodies == (1...5).map { "amount=\($0)" })
            }
        }
    }

    @Test("P3: a 500 pauses A until retryInterval has passed while B goes ahead; a success clears pauses", arguments: StoreKind.allCases)
    func pauseAndMoveOn(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let clock = ManualClock()
                let queue = PersistentRequestQueue(
                    name: "tasks",
                    store: try await place.open("tasks"),
                    session: session(clock: clock),
                    retryInterval: .seconds(30)
                )
                server.script("/anything/a", [.status(500)])
                let events = queue.events
                try await queue.add(RecordSale(server.baseURL + "/anything/a", amount: 1))
                try await queue.add(RecordSale(server.baseURL + "/anything/b", amount: 2))
                // B goes ahead while A waits: B's success makes A due again at once (the seed's rule).
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/anything/a").count == 2)
                #expect(server.requests(path: "/anything/b").count == 1)
                var seen: [String] = []
                for await event in events {
                    switch event {
                    case .paused(_, _, let reason): seen.append("paused \(reason)")
                    case .delivered(_, let status): seen.append("delivered \(status)")
                    default: seen.append("\(event)")
                    }
                    if seen.count == 3 { break }
                }
                #expect(seen == ["paused status 500", "delivered 200", "delivered 200"])
            }
        }
    }

    @Test("P3': a paused entry is not resent before retryInterval, and is at once after it", arguments: StoreKind.allCases)
    func pausedUntilInterval(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let clock = ManualClock()
                let queue = PersistentRequestQueue(
                    name: "tasks",
                    store: try await place.open("tasks"),
                    session: session(clock: clock),
                    retryInterval: .seconds(30)
                )
                server.script("/anything/a", [.status(500)])
                var events = queue.events.makeAsyncIterator()
                try await queue.add(RecordSale(server.baseURL + "/anything/a", amount: 1))
                // Paused: its pause runs from now on the manual clock.
                guard case .paused? = await events.next() else {
                    Issue.record("no pause")
                    return
                }
                #expect(server.requests(path: "/anything/a").count == 1)
                // Asking again before the pause ends sends nothing.
                let idle = queue.loopIdleCount
                queue.startProcessing()
                clock.advance(by: .seconds(29))
                // The barrier: the loop handled the wake-up and went idle again.
                await eventually { queue.loopIdleCount > idle }
                #expect(server.requests(path: "/anything/a").count == 1)
                clock.advance(by: .seconds(2))
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/anything/a").count == 2)
                // The same idempotency key on both attempts.
                let keys = server.requests(path: "/anything/a").map { $0.header("Idempotency-Key") }
                try #require(keys.count == 2)  // a failure above must not crash the test process here
                #expect(keys[0] != nil && keys[0] == keys[1])
            }
        }
    }

    @Test("entries survive the queue being closed and reopened, and are delivered in order afterwards", arguments: StoreKind.allCases)
    func persistence(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let port = closedPort()
                do {
                    let queue = PersistentRequestQueue(
                        name: "sales",
                        store: try await place.open("sales"),
                        session: session(),
                        retryInterval: .seconds(3600)
                    )
                    for amount in 1...3 {
                        try await queue.add(RecordSale("http://127.0.0.1:\(port)/post?n=\(amount)", amount: amount))
                    }
                    #expect(await queue.count == 3)
                    let attempted = try await queue.entries()
                    #expect(attempted.count == 3)
                }
                // Reopened by a new queue whose session sends to the server.
                var configuration = Session.Configuration()
                configuration.originOverride = server.baseURL
                let reopened = PersistentRequestQueue(
                    name: "sales",
                    store: try await place.open("sales"),
                    session: Session(configuration: configuration, reachability: ManualReachability())
                )
                let entries = try await reopened.entries()
                #expect(entries.count == 3)
                #expect(entries.map(\.sequence) == entries.map(\.sequence).sorted())
                _ = reopened
            }
        }
    }

    @Test("a request carrying a credential is refused by add, and nothing is written", arguments: StoreKind.allCases)
    func credentialsRefused(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let queue = PersistentRequestQueue(name: "tasks", store: try await place.open("tasks"), session: session())
            for header in ["Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key"] {
                do {
                    _ = try await PersistentRequestQueue(
                        name: "keys",
                        store: try await place.open("keys"),
                        session: session(),
                        sensitiveHeaders: ["x-api-key"]
                    ).add(RecordSale("http://127.0.0.1:1/post", amount: 1, headers: [header: "s3cret-token"]))
                    Issue.record("\(header) was accepted")
                } catch {
                    let error = error as? BrickError
                    #expect(error?.code == .invalidRequest)
                    #expect(error?.message.contains("authenticator") == true)
                    #expect(error?.message.contains("s3cret") == false)
                }
            }
            #expect(await queue.count == 0)
        }
    }

    @Test("a header named in the session's sensitiveHeaders is refused by a queue on that session")
    func sessionSensitiveHeadersRefused() async throws {
        try await withStorePlace(.sqlite) { place in
            let session = Session(configuration: .init(sensitiveHeaders: ["X-Api-Key"]), reachability: ManualReachability())
            let queue = PersistentRequestQueue(name: "keys", store: try await place.open("keys"), session: session)
            do {
                _ = try await queue.add(RecordSale("http://127.0.0.1:1/post", amount: 1, headers: ["x-api-key": "s3cret-token"]))
                Issue.record("X-Api-Key was accepted")
            } catch {
                #expect((error as? BrickError)?.code == .invalidRequest)
            }
            #expect(await queue.count == 0)
        }
    }

    @Test("with an authenticator each attempt is signed when sent, and no credential byte reaches the files", arguments: StoreKind.allCases)
    func authenticatorSignsAtSendTime(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let authenticator = Authenticator(provider: Token())
                let queue = PersistentRequestQueue(
                    name: "signed",
                    store: try await place.open("signed"),
                    session: session(),
                    authenticator: authenticator
                )
                server.script("/post", [.status(401)])
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 7))
                await queue.waitUntilEmpty()
                let sent = server.requests(path: "/post")
                #expect(sent.map { $0.header("Authorization") } == ["Bearer s3cret-1", "Bearer s3cret-2"])
                for file in try FileManager.default.contentsOfDirectory(atPath: place.directory.path) where kind == .sqlite {
                    let bytes = try Data(contentsOf: place.directory.appendingPathComponent(file))
                    #expect(bytes.range(of: Data("s3cret".utf8)) == nil, "\(file) holds a credential")
                }
            }
        }
    }

    @Test("maxAttempts sets an entry aside with its last status; retryDeadLetter makes it pending again", arguments: StoreKind.allCases)
    func deadLetters(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let clock = ManualClock()
                let queue = PersistentRequestQueue(
                    name: "tasks",
                    store: try await place.open("tasks"),
                    session: session(clock: clock),
                    retryInterval: .seconds(1)
                )
                server.script("/anything/flaky", [.status(503), .status(503)])
                let failure = Lock<BrickError?>(nil)
                var events = queue.events.makeAsyncIterator()
                let id = try await queue.add(
                    RecordSale(server.baseURL + "/anything/flaky", amount: 1),
                    options: .init(maxAttempts: 2)
                ) { result in
                    if case .failure(let error) = result { failure.withLock { $0 = error } }
                }
                guard case .paused? = await events.next() else {
                    Issue.record("no pause")
                    return
                }
                #expect(server.requests(path: "/anything/flaky").count == 1)
                clock.advance(by: .seconds(2))
                await queue.waitUntilEmpty()
                let dead = try await queue.deadLetters()
                #expect(dead.map(\.id) == [id])
                #expect(dead.first?.lastAttempt?.status == 503)
                #expect(dead.first?.attempts == 2)
                #expect(dead.first?.deadLetter?.reason.contains("ran out of attempts") == true)
                #expect(failure.withLock { $0?.code } == .storage)
                try await queue.retryDeadLetter(id)
                await queue.waitUntilEmpty()
                #expect(try await queue.deadLetters().isEmpty)
                #expect(server.requests(path: "/anything/flaky").count == 3)
            }
        }
    }

    @Test("a dedupe key replaces the pending entry, or refuses the new one", arguments: StoreKind.allCases)
    func dedupe(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let port = closedPort()
            let queue = PersistentRequestQueue(
                name: "profile",
                store: try await place.open("profile"),
                session: session(),
                retryInterval: .seconds(3600)
            )
            let url = "http://127.0.0.1:\(port)/profile"
            try await queue.add(RecordSale(url, amount: 1), options: .init(notBefore: .distantFuture, dedupeKey: "p"))
            let second = try await queue.add(
                RecordSale(url, amount: 2),
                options: .init(notBefore: .distantFuture, dedupeKey: "p")
            )
            #expect(try await queue.entries().map(\.id) == [second])
            do {
                try await queue.add(RecordSale(url, amount: 3), options: .init(dedupeKey: "p", dedupe: .reject))
                Issue.record("a duplicate was accepted")
            } catch {
                let error = error as? BrickError
                #expect(error?.code == .storage)
                #expect((error?.underlying as? OfflineStoreError)?.kind == .duplicate)
            }
            #expect(await queue.count == 1)
        }
    }

    @Test("a damaged store file is moved aside, kept, reported, and a fresh queue works")
    func corruptFile() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let file = directory.appendingPathComponent("tasks.sqlite")
                let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31) })
                try garbage.write(to: file)
                let queue = try PersistentRequestQueue(name: "tasks", directory: directory, session: session())
                var events = queue.events.makeAsyncIterator()
                guard case .storeRecovered(let moved)? = await events.next() else {
                    Issue.record("no storeRecovered event")
                    return
                }
                #expect(try Data(contentsOf: URL(fileURLWithPath: moved)) == garbage)
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 1))
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/post").count == 1)
            }
        }
    }

    @Test("an entry that cannot be read back is set aside with the reason, not dropped and not a crash", arguments: StoreKind.allCases)
    func unreadableEntry(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let store = try await place.open("tasks")
            let queue = PersistentRequestQueue(name: "tasks", store: store, session: session())
            _ = try await store.add(
                [OfflineEntry.Draft(queue: "tasks", payload: Data("{not json".utf8), createdAt: Date(timeIntervalSince1970: 0))],
                dedupe: .reject
            )
            let events = queue.events
            queue.startProcessing()
            var iterator = events.makeAsyncIterator()
            let first = await iterator.next()
            guard case .deadLettered? = first else {
                Issue.record("first event: \(String(describing: first))")
                return
            }
            await queue.waitUntilEmpty()
            let dead = try await queue.deadLetters()
            #expect(dead.count == 1)
            #expect(dead.first?.deadLetter?.reason.contains("cannot be read") == true)
        }
    }

    /// Found by fuzzing the payload decoder (Tests/Fuzz/Corpus/stored-request/huge-timeout.json):
    /// a timeout of 1e300 seconds trapped in `Duration.seconds(_:)` and took the process down.
    @Test("an entry whose stored timeout is absurd (1e300 s) is delivered, not a crash", arguments: StoreKind.allCases)
    func absurdStoredTimeout(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let store = try await place.open("tasks")
                let queue = PersistentRequestQueue(name: "tasks", store: store, session: session())
                let payload = #"{"headers":[],"method":"GET","url":"\#(server.baseURL)/get","version":1,"timeoutSeconds":1e300}"#
                _ = try await store.add(
                    [OfflineEntry.Draft(queue: "tasks", payload: Data(payload.utf8), createdAt: Date(timeIntervalSince1970: 0))],
                    dedupe: .reject
                )
                queue.startProcessing()
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/get").count == 1)
                #expect(try await queue.deadLetters().isEmpty)
            }
        }
    }

    @Test("when reachability changes, paused entries are attempted at once, not at the end of their pause", arguments: StoreKind.allCases)
    func reachabilityClearsPauses(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let reachability = ManualReachability()
                let queue = PersistentRequestQueue(
                    name: "tasks",
                    store: try await place.open("tasks"),
                    session: session(reachability: reachability),
                    retryInterval: .seconds(3600)
                )
                server.script("/post", [.resetBeforeResponse])
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 1))
                await eventually { server.requests(path: "/post").count == 1 }
                await eventually { reachability.subscriberCount > 0 }
                // The barrier: the loop recorded the failure and went idle (paused for an hour).
                let idle = queue.loopIdleCount
                queue.startProcessing()
                await eventually { queue.loopIdleCount > idle }
                #expect(await queue.count == 1)
                #expect(server.requests(path: "/post").count == 1)
                reachability.set(.reachable)
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/post").count == 2)
            }
        }
    }

    @Test("retryPausedEntriesNow sends a paused entry at once (one attempt spent); startProcessing does not", arguments: StoreKind.allCases)
    func retryPausedEntriesNow(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let queue = PersistentRequestQueue(
                    name: "tasks",
                    store: try await place.open("tasks"),
                    session: session(),
                    retryInterval: .seconds(3600)
                )
                server.script("/post", [.resetBeforeResponse])
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 1))
                await eventually { server.requests(path: "/post").count == 1 }
                // startProcessing keeps the hour's pause: the loop looks, goes idle, sends nothing.
                let idle = queue.loopIdleCount
                queue.startProcessing()
                await eventually { queue.loopIdleCount > idle }
                #expect(server.requests(path: "/post").count == 1)
                queue.retryPausedEntriesNow()
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/post").count == 2)
                let dead = try await queue.deadLetters()
                #expect(dead.isEmpty)
            }
        }
    }

    @Test("counts streams the pending count as it changes", arguments: StoreKind.allCases)
    func counts(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let queue = PersistentRequestQueue(
                name: "tasks",
                store: try await place.open("tasks"),
                session: session(),
                retryInterval: .seconds(3600)
            )
            let seen = Lock<[Int]>([])
            let counts = queue.counts
            let reader = Task { for await count in counts { seen.withLock { $0.append(count) } } }
            await eventually { !seen.withLock { $0.isEmpty } }
            let url = "http://127.0.0.1:\(closedPort())/post"
            try await queue.add(RecordSale(url, amount: 1), options: .init(notBefore: .distantFuture))
            try await queue.add(RecordSale(url, amount: 2), options: .init(notBefore: .distantFuture))
            await eventually { seen.withLock { $0.last } == 2 }
            try await queue.removeAll()
            await eventually { seen.withLock { $0.last } == 0 }
            reader.cancel()
            #expect(seen.withLock { $0.first } == 0)
            #expect(seen.withLock { $0 }.contains(1))
        }
    }

    @Test("a queue made long after its session stores today's dates, so that other processes read them right", arguments: StoreKind.allCases)
    func datesOfALateQueue(kind: StoreKind) async throws {
        try await withStorePlace(kind) { place in
            let clock = ManualClock()
            let session = session(clock: clock)
            // The session has been up for an hour when the queue is made.
            clock.advance(by: .seconds(3600))
            let queue = PersistentRequestQueue(name: "late", store: try await place.open("late"), session: session)
            let url = "http://127.0.0.1:\(closedPort())/post"
            try await queue.add(RecordSale(url, amount: 1), options: .init(notBefore: .distantFuture))
            let entry = try #require(try await queue.entries().first)
            #expect(abs(entry.createdAt.timeIntervalSinceNow) < 60, "stored createdAt \(entry.createdAt), now \(Date())")
        }
    }

    @Test("a scheduled entry waits for its notBefore", arguments: StoreKind.allCases)
    func scheduled(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let clock = ManualClock()
                let queue = PersistentRequestQueue(name: "tasks", store: try await place.open("tasks"), session: session(clock: clock))
                try await queue.add(
                    RecordSale(server.baseURL + "/post", amount: 1),
                    options: .init(notBefore: Date().addingTimeInterval(60))
                )
                await eventually { clock.waiterCount >= 1 }
                #expect(server.requests(path: "/post").isEmpty)
                clock.advance(by: .seconds(61))
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/post").count == 1)
            }
        }
    }
}

/// A token that changes with each refresh.
final class Token: CredentialProvider {
    private let generation = Lock(1)
    func authorizationHeaders() async throws -> [String: String] {
        ["Authorization": "Bearer s3cret-\(generation.withLock { $0 })"]
    }
    func refresh() async throws { generation.withLock { $0 += 1 } }
}
