import BrickOfflineTestSupport
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// A fleet's database in a state no worker would leave it in — a hand-edited lease, a column
/// altered to allow NULL — never stops a queue.
@Suite("PostgreSQL store: hostile rows do not stop a queue", .serialized, .timeLimit(.minutes(2)))
struct PostgresHostileStateTests {
    private let logger = Logger(label: "hostile-state")

    @Test("a lease expiring ten years ahead (a hand-edited row) does not block a cap-1 queue: it is void")
    func farFutureLease() async throws {
        try await withServer { server in
            try await withFleetStore { store, running in
                _ = try await addEntries(2, to: store, queue: "stuck", url: { server.baseURL + "/post?n=\($0)" })
                try await running.client.query(
                    """
                    UPDATE \(unescaped: store.schema).entry SET lease_token = gen_random_uuid(), lease_owner = 'ghost',
                        lease_expires_at = now() + interval '10 years'
                    WHERE sequence = (SELECT min(sequence) FROM \(unescaped: store.schema).entry)
                    """,
                    logger: logger
                )
                // Neither the next due date nor a claim honours it.
                let due = try #require(try await store.nextDue(queue: "stuck"))
                #expect(due < Date().addingTimeInterval(60))
                let head = try await store.leaseHead(queue: "stuck", now: Date(), for: .seconds(10))
                #expect(head?.lease?.token != nil)
                // A capped claim does not count it under the cap either.
                _ = try await addEntries(1, to: store, queue: "capped", url: { server.baseURL + "/post?c=\($0)" })
                try await running.client.query(
                    """
                    UPDATE \(unescaped: store.schema).entry SET lease_token = gen_random_uuid(), lease_owner = 'ghost',
                        lease_expires_at = now() + interval '10 years'
                    WHERE queue = 'capped'
                    """,
                    logger: logger
                )
                _ = try await addEntries(1, to: store, queue: "capped", url: { server.baseURL + "/post?d=\($0)" })
                let claimed = try await store.lease(queue: "capped", limit: 1, cap: 1, now: Date(), for: .seconds(10))
                #expect(claimed.count == 1)
                // A real lease (within its duration) still holds.
                #expect(try await store.leaseHead(queue: "stuck", now: Date(), for: .seconds(10)) == nil)
            }
        }
    }

    @Test("a NULL in a column altered to allow it: that row is set aside with the reason; the rest of the queue is claimed and listed")
    func nullInRequiredColumn() async throws {
        try await withServer { server in
            try await withFleetStore { store, running in
                let ids = try await addEntries(3, to: store, queue: "nulls", url: { server.baseURL + "/post?n=\($0)" })
                try await running.client.query(
                    "ALTER TABLE \(unescaped: store.schema).entry ALTER COLUMN idempotency_key DROP NOT NULL",
                    logger: logger
                )
                try await running.client.query(
                    "UPDATE \(unescaped: store.schema).entry SET idempotency_key = NULL WHERE id = \(ids[0])",
                    logger: logger
                )
                let listed = try await store.list(queue: "nulls")
                #expect(listed.map(\.id) == Array(ids[1...]))
                let claimed = try await store.lease(queue: "nulls", limit: 10, cap: 10, now: Date(), for: .seconds(10))
                #expect(Set(claimed.map(\.id)) == Set(ids[1...]))
                let dead = try await store.deadLetters(queue: "nulls")
                #expect(dead.isEmpty, "the unreadable row cannot be read as a dead letter either")
                var reason: String?
                for try await text in try await running.client.query(
                    "SELECT dead_reason FROM \(unescaped: store.schema).entry WHERE id = \(ids[0])",
                    logger: logger
                ).decode(String?.self) {
                    reason = text
                }
                #expect(reason?.contains("idempotency_key") == true, "\(String(describing: reason))")
            }
        }
    }

    @Test("workers with different caps: every claim holds to the smallest cap of the live leases, and the difference is logged as a warning")
    func mixedCaps() async throws {
        try await withServer { server in
            try await withFleetStore { store, running in
                let logs = CapturedLogs()
                var logger = Logger(label: "caps", factory: { logs.handler(label: $0) })
                logger.logLevel = .info
                let strict = try await PostgresOfflineStore(client: running.client, schema: store.schema, workerName: "strict", logger: logger, startupDeadline: PostgresFixture.startupDeadline)
                let eager = try await PostgresOfflineStore(client: running.client, schema: store.schema, workerName: "eager", logger: logger, startupDeadline: PostgresFixture.startupDeadline)
                _ = try await addEntries(20, to: store, queue: "capped", url: { server.baseURL + "/post?n=\($0)" })
                // A worker with cap 1 holds the head; one with cap 10 (set too late, or stale)
                // takes nothing while it does.
                let head = try #require(try await strict.leaseHead(queue: "capped", now: Date(), for: .seconds(30)))
                #expect(try await eager.lease(queue: "capped", limit: 10, cap: 10, now: Date(), for: .seconds(30)).isEmpty)
                _ = try await strict.complete(head.id, lease: try #require(head.lease?.token))
                // The other way round: cap 10 first, then cap 1 takes nothing while any is leased.
                let batch = try await eager.lease(queue: "capped", limit: 10, cap: 10, now: Date(), for: .seconds(30))
                #expect(batch.count == 10)
                #expect(try await strict.leaseHead(queue: "capped", now: Date(), for: .seconds(30)) == nil)
                // A third worker with cap 3 takes nothing over the 10 already out.
                #expect(try await strict.lease(queue: "capped", limit: 3, cap: 3, now: Date(), for: .seconds(30)).isEmpty)
                let lines = logs.lines.withLock { $0 }
                #expect(lines.contains { $0.contains("different simultaneousRequestCap") && $0.contains("1,10") }, "\(lines.suffix(3))")
            }
        }
    }
}
