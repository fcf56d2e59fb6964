// outbox-worker: one worker of a fleet that delivers a PostgreSQL outbox.
//
//   eval "$(Scripts/private-postgres.sh start /tmp/brick-pg)"   # or any database named by PG*
//   swift run outbox-worker --enqueue http://127.0.0.1:8080/hooks 100   # add 100 orders + their calls
//   swift run outbox-worker                                             # drain until SIGTERM (Ctrl-C: SIGINT)
//
// Run it on several machines at once: they share the queue, at most `--cap` calls in flight in all.
// On SIGTERM or SIGINT it stops claiming, lets the calls under way finish (10 s at most), hands the
// rest back to the other workers and exits.
import BrickLifecycle
import BrickOfflinePostgres
import BrickRequest
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import UnixSignals

/// The call the outbox makes: tell a partner that an order exists.
final class NotifyPartner: Component, POSTRequestType, JSONBodyRequestType {
    let urlString: String
    let order: Int64
    var jsonBody: [String: Int64]? { ["order": order] }

    init(url: String, order: Int64) {
        self.urlString = url
        self.order = order
        super.init()
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}
let cap = option("--cap", in: arguments).flatMap(Int.init) ?? 16
let schema = option("--schema", in: arguments) ?? "brick_offline"
var enqueue: Worker.Enqueue?
if let index = arguments.firstIndex(of: "--enqueue") {
    guard index + 2 < arguments.count, let count = Int(arguments[index + 2]) else {
        print("usage: outbox-worker [--cap N] [--schema NAME] [--enqueue URL COUNT]")
        exit(64)
    }
    enqueue = Worker.Enqueue(url: arguments[index + 1], count: count)
}

LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
var logger = Logger(label: "outbox-worker")
logger.logLevel = .info

let client: PostgresClient
do {
    // PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE (or DATABASE_URL).
    client = PostgresClient(configuration: try PostgresOfflineStore.clientConfiguration(), backgroundLogger: logger)
} catch {
    logger.error("cannot configure the database connection: \(error)")
    exit(1)
}

/// Adds orders and their outbox entries, one transaction each, then drains the queue until told to stop.
struct Worker: Service {
    /// Orders to add first, each with its call to `url`.
    struct Enqueue {
        var url: String
        var count: Int
    }

    let client: PostgresClient
    let logger: Logger
    let schema: String
    let cap: Int
    let enqueue: Enqueue?

    func run() async throws {
        let store = try await PostgresOfflineStore(client: client, schema: schema, logger: logger)
        let queue = PersistentRequestQueue(
            name: "outbox",
            store: store,
            session: Session(),
            retryInterval: .seconds(5),
            simultaneousRequestCap: cap
        )
        if let enqueue {
            try await client.query(
                "CREATE TABLE IF NOT EXISTS \(unescaped: schema).orders (id bigserial PRIMARY KEY, placed_at timestamptz DEFAULT now())",
                logger: logger
            )
            for _ in 0..<enqueue.count {
                try await client.withTransaction(logger: logger) { connection in
                    var order: Int64 = 0
                    for try await id in try await connection.query(
                        "INSERT INTO \(unescaped: schema).orders DEFAULT VALUES RETURNING id",
                        logger: logger
                    ).decode(Int64.self) {
                        order = id
                    }
                    // The call exists if and only if the order does.
                    try await queue.add(NotifyPartner(url: enqueue.url, order: order), in: connection)
                }
            }
            logger.info("added \(enqueue.count) orders and their calls")
        }
        let events = queue.events
        let reporter = Task {
            for await event in events { logger.info("\(event)") }
        }
        defer { reporter.cancel() }
        logger.info("draining the outbox", metadata: ["worker": "\(store.workerName)", "cap": "\(cap)"])
        try await OfflineQueueService(queue, gracePeriod: .seconds(10)).run()
        let pending = try await store.count(queue: "outbox")
        logger.info("stopped; pending entries are left for the other workers", metadata: ["pending": "\(pending)"])
    }
}

let group = ServiceGroup(
    configuration: ServiceGroupConfiguration(
        services: [
            .init(service: client),
            .init(
                service: Worker(client: client, logger: logger, schema: schema, cap: cap, enqueue: enqueue),
                successTerminationBehavior: .gracefullyShutdownGroup),
        ],
        gracefulShutdownSignals: [.sigterm, .sigint],
        logger: logger
    )
)
do {
    try await group.run()
} catch {
    logger.error("outbox-worker failed: \(error)")
    exit(1)
}
