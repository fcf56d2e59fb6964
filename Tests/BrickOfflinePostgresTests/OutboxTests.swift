import BrickOfflineTestSupport
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Logging
import PostgresNIO
import Testing

/// The outbox (`add(_:options:in:)`) never lets the caller's transaction roll back unseen: an
/// error PostgreSQL raises while the add runs is thrown by the add, so `withTransaction` throws.
@Suite("Outbox errors reach the caller", .serialized, .timeLimit(.minutes(2)))
struct OutboxTests {
    private let logger = Logger(label: "outbox-errors")

    /// Whether `orders` holds `id`.
    private func orderExists(_ id: Int, schema: String, client: PostgresClient) async throws -> Bool {
        var found = false
        for try await _ in try await client.query("SELECT id FROM \(unescaped: schema).orders WHERE id = \(id)", logger: logger) {
            found = true
        }
        return found
    }

    @Test("two transactions add the same dedupe key at once: the second one's add throws with SQLSTATE 23505, its transaction is not reported committed")
    func concurrentDedupeKey() async throws {
        try await withServer { server in
            try await withFleetStore { store, running in
                let client = running.client
                try await client.query("CREATE TABLE \(unescaped: store.schema).orders (id bigint PRIMARY KEY)", logger: logger)
                let queue = PersistentRequestQueue(name: "outbox", store: store, session: Session())
                let options = PersistentRequestQueue.EntryOptions(dedupeKey: "order-sync")
                let firstAdded = AsyncStream.makeStream(of: Void.self)
                let releaseFirst = AsyncStream.makeStream(of: Void.self)
                let schema = store.schema
                let logger = logger
                // The first transaction adds and stays open until the second one waits on its row.
                let first = Task {
                    try await client.withTransaction(logger: logger) { connection in
                        try await connection.query("INSERT INTO \(unescaped: schema).orders (id) VALUES (1)", logger: logger)
                        try await queue.add(RecordSale(server.baseURL + "/post?order=1", amount: 1), options: options, in: connection)
                        firstAdded.continuation.yield()
                        for await _ in releaseFirst.stream { break }
                    }
                }
                for await _ in firstAdded.stream { break }
                let secondPID = AsyncStream.makeStream(of: Int32.self)
                let second = Task { () -> (any Error)? in
                    do {
                        try await client.withTransaction(logger: logger) { connection in
                            for try await pid in try await connection.query("SELECT pg_backend_pid()", logger: logger).decode(Int32.self) {
                                secondPID.continuation.yield(pid)
                            }
                            try await connection.query("INSERT INTO \(unescaped: schema).orders (id) VALUES (2)", logger: logger)
                            try await queue.add(RecordSale(server.baseURL + "/post?order=2", amount: 2), options: options, in: connection)
                        }
                        return nil
                    } catch {
                        return error
                    }
                }
                var pid: Int32 = 0
                for await value in secondPID.stream {
                    pid = value
                    break
                }
                // The second add waits for the first transaction's row (the unique index).
                await eventually {
                    var waiting = false
                    guard let rows = try? await client.query("SELECT cardinality(pg_blocking_pids(\(pid)))", logger: logger) else { return false }
                    do {
                        for try await count in rows.decode(Int.self) { waiting = count > 0 }
                    } catch {
                        return false
                    }
                    return waiting
                }
                releaseFirst.continuation.yield()
                try await first.childValue
                let error = await second.childValue
                #expect(error != nil, "the second transaction was reported committed")
                let brickError = (error as? PostgresTransactionError)?.closureError as? BrickError
                #expect(brickError?.code == .storage, "\(String(describing: error))")
                #expect(brickError?.message.contains("23505") == true, "\(String(describing: brickError?.message))")
                #expect(try await orderExists(1, schema: schema, client: client))
                #expect(try await !orderExists(2, schema: schema, client: client))
                #expect(try await store.count(queue: "outbox") == 1)
            }
        }
    }

    @Test("a queue name over the limit is refused before any I/O by every add, the outbox's included, and the caller's transaction throws")
    func queueNameTooLong() async throws {
        try await withServer { server in
            try await withFleetStore { store, running in
                let client = running.client
                try await client.query("CREATE TABLE \(unescaped: store.schema).orders (id bigint PRIMARY KEY)", logger: logger)
                let longName = String(repeating: "q", count: 8_100)
                let queue = PersistentRequestQueue(name: longName, store: store, session: Session())
                let schema = store.schema
                let logger = logger
                do {
                    try await client.withTransaction(logger: logger) { connection in
                        try await connection.query("INSERT INTO \(unescaped: schema).orders (id) VALUES (1)", logger: logger)
                        try await queue.add(RecordSale(server.baseURL + "/post?order=1", amount: 1), in: connection)
                    }
                    Issue.record("the transaction was reported committed")
                } catch {
                    let brickError = (error as? PostgresTransactionError)?.closureError as? BrickError
                    #expect(brickError?.code == .invalidRequest, "\(error)")
                    #expect(brickError?.message.contains("\(OfflineEntry.maximumQueueNameBytes) bytes") == true, "\(String(describing: brickError?.message))")
                }
                #expect(try await !orderExists(1, schema: schema, client: client))
                // The plain add and the store itself refuse it too.
                await #expect(throws: BrickError.self) { try await queue.add(RecordSale(server.baseURL + "/post", amount: 2)) }
                let name = String(repeating: "n", count: OfflineEntry.maximumQueueNameBytes)
                var draft = try PersistentRequestQueue(name: name, store: store, session: Session())
                    .draft(RecordSale(server.baseURL + "/post", amount: 3), options: .init())
                #expect(try await store.add([draft], dedupe: .reject).count == 1)
                draft.queue = name + "n"
                await #expect(throws: OfflineStoreError.self) { try await store.add([draft], dedupe: .reject) }
                #expect(try await store.count(queue: name + "n") == 0)
            }
        }
    }
}
