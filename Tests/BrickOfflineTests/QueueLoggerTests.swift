import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTesting
import BrickTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// What a logger given to a queue or a manager receives: every event with its logger's label.
final class LabelledRecords: Sendable {
    struct Record: Sendable {
        var label: String
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    private let records = Mutex<[Record]>([])

    var all: [Record] { records.withLock { $0 } }

    func logger(label: String) -> Logger {
        Logger(label: label) { label in Handler(label: label, records: self) }
    }

    fileprivate func append(_ record: Record) { records.withLock { $0.append(record) } }

    private struct Handler: LogHandler {
        let label: String
        let records: LabelledRecords
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = metadata.merging(event.metadata ?? [:]) { $1 }.mapValues { "\($0)" }
            records.append(Record(label: label, level: event.level, message: "\(event.message)", metadata: fields))
        }
    }
}

@Suite("The queue and the manager log to a logger of their own", .timeLimit(.minutes(3)))
struct QueueLoggerTests {
    @Test("a dead letter is logged on the queue's logger, with its label, the worker's metadata and brick.queue")
    func queueLogsDeadLetters() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let records = LabelledRecords()
                var logger = records.logger(label: "orders-worker")
                logger[metadataKey: "worker"] = "w1"
                let sessionRecords = LabelledRecords()
                let session = Session(logger: sessionRecords.logger(label: "session"))
                let queue = PersistentRequestQueue(
                    name: "orders",
                    store: try SQLiteOfflineStore(name: "orders", directory: directory),
                    session: session,
                    logger: logger
                )
                server.script("/anything/refused", [.status(500)])
                try await queue.add(RecordSale(server.baseURL + "/anything/refused", amount: 1), options: .init(maxAttempts: 1))
                await queue.waitUntilEmpty()
                let setAside = try #require(records.all.first { $0.message == "offline entry set aside" })
                #expect(setAside.label == "orders-worker")
                #expect(setAside.level == .warning)
                #expect(setAside.metadata["brick.queue"] == "orders")
                #expect(setAside.metadata["worker"] == "w1")
                #expect(setAside.metadata["brick.reason"]?.contains("500") == true)
                // Not on the session's logger.
                #expect(!sessionRecords.all.contains { $0.message == "offline entry set aside" })
                await queue.close()
            }
        }
    }

    @Test("a store failure is logged on the manager's logger, with brick.manager")
    func managerLogsStoreFailures() async throws {
        try await withDirectory { directory in
            MockRequest.board = MockBoard()
            let records = LabelledRecords()
            let store = FailingStore(try SQLiteOfflineStore(name: "failing", directory: directory))
            store.failsComplete.withLock { $0 = true }
            let manager = OfflineRequestManager(
                name: "failing",
                store: store,
                session: Session(reachability: ManualReachability()),
                logger: records.logger(label: "uploads-worker")
            )
            let events = manager.events
            manager.register(MockRequest.self)
            try await manager.queueRequest(MockRequest(name: "done"))
            for await event in events {
                if case .storeFailed = event { break }
            }
            let failed = try #require(records.all.first { $0.message == "offline store failed" })
            #expect(failed.label == "uploads-worker")
            #expect(failed.metadata["brick.manager"] == "failing")
            #expect(failed.metadata["error.message"]?.contains("refused by the test") == true)
            manager.close()
        }
    }
}
