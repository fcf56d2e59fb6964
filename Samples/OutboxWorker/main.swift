// outbox-worker: one worker of a fleet that delivers a PostgreSQL outbox.
//
//   eval "$(Scripts/private-postgres.sh start /tmp/brick-pg)"   # or any database named by PG*
//   swift run outbox-worker --enqueue http://127.0.0.1:8080/hooks 100   # add 100 orders + their calls
//   swift run outbox-worker --allow 127.0.0.1                           # drain until SIGTERM (Ctrl-C: SIGINT)
//
// The partners' URLs are other people's: the worker reaches public addresses only
// (`EgressPolicy.publicInternetOnly`; `--allow RANGE` adds a host or range, as the loopback
// partner above needs), and signs every call as a Standard Webhooks message with WEBHOOK_SECRET
// (`whsec_…`; WEBHOOK_SECRET_PREVIOUS too during a rotation). See the article "Delivering
// webhooks safely".
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

/// The call the outbox makes: tell a partner that an order exists, signed.
final class NotifyPartner: Component, POSTRequestType, JSONBodyRequestType, SignedWebhookType {
    let urlString: String
    let order: Int64
    let webhookSigner: WebhookSigner
    var jsonBody: [String: Int64]? { ["order": order] }

    init(url: String, order: Int64, signer: WebhookSigner) {
        self.urlString = url
        self.order = order
        self.webhookSigner = signer
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
var allowed: [EgressPolicy.Destination] = []
if let text = option("--allow", in: arguments) {
    do {
        allowed.append(try EgressPolicy.Destination(text))
    } catch {
        print("--allow: \(error.message)")
        exit(64)
    }
}
var enqueue: Enqueuer.Enqueue?
if let index = arguments.firstIndex(of: "--enqueue") {
    guard index + 2 < arguments.count, let count = Int(arguments[index + 2]) else {
        print("usage: outbox-worker [--cap N] [--schema NAME] [--allow HOST-OR-RANGE] [--enqueue URL COUNT]")
        exit(64)
    }
    enqueue = Enqueuer.Enqueue(url: arguments[index + 1], count: count)
}

LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
var logger = Logger(label: "outbox-worker")
logger.logLevel = .info

// The secrets stay in memory: the queue signs each attempt when it sends it.
let environment = ProcessInfo.processInfo.environment
let secrets = [environment["WEBHOOK_SECRET"], environment["WEBHOOK_SECRET_PREVIOUS"]].compactMap { $0 }
let signer: WebhookSigner
do {
    if secrets.isEmpty { logger.warning("no WEBHOOK_SECRET: signing with a random secret no receiver knows") }
    signer = try WebhookSigner(secrets: secrets.isEmpty ? [WebhookSigner.generateSecret()] : secrets)
} catch {
    logger.error("\(error.message)")
    exit(1)
}
var sessionConfiguration = Session.Configuration()
sessionConfiguration.egressPolicy = .publicInternetOnly(allowing: allowed)
let partners = Session(configuration: sessionConfiguration)

let client: PostgresClient
do {
    // PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE (or DATABASE_URL).
    client = PostgresClient(configuration: try PostgresOfflineStore.clientConfiguration(), backgroundLogger: logger)
} catch {
    logger.error("cannot configure the database connection: \(error)")
    exit(1)
}

// The queue's service opens the store once the group runs the client, and delivers until SIGTERM.
let outbox = PostgresQueueService(client: client, schema: schema, logger: logger) { [logger] store in
    logger.info("draining the outbox", metadata: ["worker": "\(store.workerName)", "cap": "\(cap)"])
    return PersistentRequestQueue(
        name: "outbox",
        store: store,
        session: partners,
        retryInterval: .seconds(5),
        webhookSigner: signer,
        simultaneousRequestCap: cap
    )
}

/// Adds orders and their outbox entries, one transaction each (`--enqueue`), then ends.
struct Enqueuer: Service {
    /// Orders to add, each with its call to `url`.
    struct Enqueue {
        var url: String
        var count: Int
    }

    let client: PostgresClient
    let outbox: PostgresQueueService
    let logger: Logger
    let schema: String
    let enqueue: Enqueue
    let signer: WebhookSigner

    func run() async throws {
        let queue = try await outbox.queue()
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
                try await queue.add(NotifyPartner(url: enqueue.url, order: order, signer: signer), in: connection)
            }
        }
        logger.info("added \(enqueue.count) orders and their calls")
    }
}

/// Logs what the queue does (deliveries, retries, dead letters) until shutdown.
struct EventLog: Service {
    let outbox: PostgresQueueService
    let logger: Logger

    func run() async throws {
        let queue = try await outbox.queue()
        for await event in queue.events.cancelOnGracefulShutdown() { logger.info("\(event)") }
    }
}

var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
    .init(service: client),
    .init(service: outbox, successTerminationBehavior: .gracefullyShutdownGroup),
    .init(service: EventLog(outbox: outbox, logger: logger)),
]
if let enqueue {
    services.append(
        .init(
            service: Enqueuer(
                client: client,
                outbox: outbox,
                logger: logger,
                schema: schema,
                enqueue: enqueue,
                signer: signer
            ),
            successTerminationBehavior: .ignore
        )
    )
}
let group = ServiceGroup(
    configuration: ServiceGroupConfiguration(
        services: services,
        gracefulShutdownSignals: [.sigterm, .sigint],
        logger: logger
    )
)
do {
    try await group.run()
    logger.info("stopped; entries not delivered are left for the other workers")
} catch {
    logger.error("outbox-worker failed: \(error)")
    exit(1)
}
