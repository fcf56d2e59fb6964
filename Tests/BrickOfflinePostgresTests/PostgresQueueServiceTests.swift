import BrickOfflinePostgres
import BrickOfflineTestSupport
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Testing

/// A worker as one `ServiceGroup`: the client, the queue's service (which opens the store inside
/// `run()`), and the code that adds — the shape the "Running a fleet" article shows.
@Suite("PostgresQueueService: a fleet worker as one ServiceGroup", .serialized, .timeLimit(.minutes(2)))
struct PostgresQueueServiceTests {
    private let logger = Logger(label: "queue-service")

    /// The error a caller throws to roll its transaction back on purpose.
    struct OrderRejected: Error {}

    @Test("the service opens the store once the group runs; queue() waits for it; an outbox add commits with its order, a deliberate rollback stores neither; graceful shutdown ends it")
    func group() async throws {
        try await withServer { server in
            let schema = PostgresFixture.freshSchema()
            let client = PostgresClient(configuration: try await PostgresFixture.server().configuration(), backgroundLogger: logger)
            let service = PostgresQueueService(client: client, schema: schema, startupDeadline: PostgresFixture.startupDeadline) { store in
                PersistentRequestQueue(name: "outbox", store: store, session: Session(), retryInterval: .milliseconds(100), simultaneousRequestCap: 4)
            }
            let group = ServiceGroup(
                configuration: ServiceGroupConfiguration(
                    services: [.init(service: client), .init(service: service)], logger: logger
                )
            )
            let running = Task { try await group.run() }
            let queue = try await service.queue()
            let logger = logger
            try await client.query("CREATE TABLE \(unescaped: schema).orders (id bigint PRIMARY KEY)", logger: logger)
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query("INSERT INTO \(unescaped: schema).orders (id) VALUES (1)", logger: logger)
                try await queue.add(RecordSale(server.baseURL + "/anything/order-1", amount: 1), options: .init(dedupeKey: "order-1"), in: connection)
            }
            // A rollback on purpose: postgres-nio wraps the closure's error, so it is matched there.
            do {
                try await client.withTransaction(logger: logger) { connection in
                    try await connection.query("INSERT INTO \(unescaped: schema).orders (id) VALUES (2)", logger: logger)
                    try await queue.add(RecordSale(server.baseURL + "/anything/order-2", amount: 2), options: .init(dedupeKey: "order-2"), in: connection)
                    throw OrderRejected()
                }
                Issue.record("the transaction was reported committed")
            } catch let error as PostgresTransactionError {
                #expect(error.closureError is OrderRejected)
                #expect(error.rollbackError == nil)
            }
            // Neither the order nor its call exists.
            #expect(try await !queue.entries().contains { $0.dedupeKey == "order-2" })
            var orders: [Int64] = []
            for try await id in try await client.query("SELECT id FROM \(unescaped: schema).orders ORDER BY id", logger: logger).decode(Int64.self) {
                orders.append(id)
            }
            #expect(orders == [1])
            await queue.waitUntilEmpty()
            #expect(server.requests(path: "/anything/order-1").count == 1)
            #expect(server.requests(path: "/anything/order-2").isEmpty)
            await group.triggerGracefulShutdown()
            try await running.value
        }
    }

    @Test("a store that cannot open: queue() throws what opening threw, and so does the group")
    func openingFails() async throws {
        let client = PostgresClient(configuration: try await PostgresFixture.server().configuration(), backgroundLogger: logger)
        let service = PostgresQueueService(client: client, schema: "Not A Schema") { store in
            PersistentRequestQueue(name: "never", store: store)
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: [.init(service: client), .init(service: service)], logger: logger)
        )
        let running = Task { try await group.run() }
        await #expect(throws: OfflineStoreError.self) { try await service.queue() }
        await #expect(throws: (any Error).self) { try await running.value }
    }
}
