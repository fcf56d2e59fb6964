// A fleet worker for the PostgreSQL tests and benchmarks: drains one queue of a
// PostgresOfflineStore (named by the PG* variables) until SIGTERM (graceful) or SIGKILL.
//
//   brick-fleet-probe SCHEMA QUEUE CAP LEASE_MS [notify|poll]
//
// Prints `ready` once processing, then one line per event of its queue.
import BrickLifecycle
import BrickOffline
import BrickOfflinePostgres
import BrickRequest
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import UnixSignals

let arguments = CommandLine.arguments
guard arguments.count >= 5, let cap = Int(arguments[3]), let leaseMilliseconds = Int(arguments[4]) else {
    FileHandle.standardError.write(Data("usage: brick-fleet-probe SCHEMA QUEUE CAP LEASE_MS [notify|poll]\n".utf8))
    exit(64)
}
let schema = arguments[1]
let queueName = arguments[2]
let pollOnly = arguments.count > 5 && arguments[5] == "poll"

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

var logger = Logger(label: "fleet-probe")
logger.logLevel = .warning
var configuration = try PostgresOfflineStore.clientConfiguration()
configuration.options.maximumConnections = 6
let client = PostgresClient(configuration: configuration)
let clientTask = Task { await client.run() }
let store = try await PostgresOfflineStore(
    client: client,
    schema: schema,
    leaseDuration: .milliseconds(leaseMilliseconds),
    wakeUps: pollOnly ? .pollOnly() : .notify(),
    logger: logger,
    // Workers start together on a loaded test machine: more than the default 10 s to open.
    startupDeadline: .seconds(120)
)
let queue = PersistentRequestQueue(
    name: queueName,
    store: store,
    session: Session(),
    retryInterval: .milliseconds(200),
    simultaneousRequestCap: cap
)
let events = queue.events
let printer = Task {
    for await event in events {
        switch event {
        case .delivered(let id, let status): say("delivered \(id) \(status)")
        case .paused(let id, _, let reason): say("paused \(id) \(reason)")
        case .deadLettered(let id, let reason): say("dead \(id) \(reason)")
        case .storeFailed(let reason): say("storeFailed \(reason)")
        case .storeRecovered: say("storeRecovered")
        @unknown default: say("event \(event)")
        }
    }
}
say("ready")
let group = ServiceGroup(
    services: [OfflineQueueService(queue, gracePeriod: .seconds(5))],
    gracefulShutdownSignals: [.sigterm],
    logger: logger
)
try await group.run()
say("stopped")
clientTask.cancel()
