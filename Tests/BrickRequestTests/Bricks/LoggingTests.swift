import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import InMemoryLogging
import Logging
import Synchronization
import Testing

/// Log records, shared by the copies of one ``CapturingLogHandler``.
final class LogRecords: Sendable {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    private let records = Lock<[Record]>([])

    var all: [Record] { records.withLock { $0 } }

    func append(_ record: Record) { records.withLock { $0.append(record) } }
}

/// A value-type log handler (as swift-log asks) that appends every event to a ``LogRecords``.
struct CapturingLogHandler: LogHandler {
    let records: LogRecords
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let fields = (event.metadata ?? [:]).mapValues { "\($0)" }
        records.append(.init(level: event.level, message: "\(event.message)", metadata: fields))
    }
}

@Suite("Session logging", .timeLimit(.minutes(2)))
struct LoggingTests {
    /// Sent with every request; its value must never reach the log.
    static let credentials = ["Authorization": "Bearer secret-token"]

    private func session(level: Logger.Level, records: LogRecords) -> Session {
        Session(logger: Logger(label: "test") { _ in CapturingLogHandler(records: records, logLevel: level) })
    }

    /// A GET carrying ``credentials``.
    private func get(_ url: String, _ session: Session) async -> Response<Data, BrickError> {
        await SessionGet(url: url, session: session, headers: Self.credentials).response()
    }

    @Test("at debug: each request logs its start, its end or its failure, with method, URL without query, status")
    func debugLevel() async throws {
        try await withServer { server in
            let records = LogRecords()
            let session = session(level: .debug, records: records)
            let ok = await get(server.baseURL + "/status/200?token=s3cr3t", session)
            #expect(ok.status == .ok)
            let refused = await get("http://127.0.0.1:1/closed?signature=s3cr3t", session)
            #expect(refused.error != nil)
            let logged = records.all
            // (The retry engine logs its decision on a failure too, even when it may not retry.)
            #expect(
                logged.map(\.message) == [
                    "request started", "request finished", "request started", "retry engine delivers", "request failed",
                ]
            )
            #expect(logged.map(\.level) == [.debug, .debug, .debug, .debug, .debug])
            #expect(logged[0].metadata["http.request.method"] == "GET")
            #expect(logged[0].metadata["url.full"] == server.baseURL + "/status/200")
            #expect(logged[1].metadata["http.response.status_code"] == "200")
            #expect(logged[4].metadata["url.full"] == "http://127.0.0.1:1/closed")
            #expect(logged[4].metadata["error.type"] == "cannotConnect")
            #expect(logged[4].metadata["error.message"]?.contains("cannotConnect") == true)
            // Header values and queries never reach the log.
            #expect(!logged.contains { record in record.metadata.values.contains { $0.contains("secret-token") } })
            #expect(!logged.contains { record in record.metadata.values.contains { $0.contains("s3cr3t") } })
        }
    }

    @Test("above debug (the default): a library logs nothing in normal operation, failures included (the caller gets them)")
    func infoLevel() async throws {
        try await withServer { server in
            let records = LogRecords()
            let session = session(level: .info, records: records)
            let ok = await get(server.baseURL + "/status/200", session)
            #expect(ok.status == .ok)
            #expect(records.all.isEmpty)
            let refused = await get("http://127.0.0.1:1/closed", session)
            #expect(refused.error?.code == .cannotConnect)
            #expect(records.all.isEmpty)
        }
    }

    @Test("a request's own logger takes its entries, with the operation's name; the session's gets none")
    func perCallLogger() async throws {
        try await withServer { server in
            let records = LogRecords()
            let session = session(level: .debug, records: records)
            let own = InMemoryLogHandler()
            var logger = Logger(label: "call") { _ in own }
            logger.logLevel = .debug
            let response = await LoggedGet(server.baseURL + "/status/200", session: session, logger: logger).response()
            #expect(response.status == .ok)
            #expect(records.all.isEmpty)
            #expect(own.entries.map(\.message.description) == ["request started", "request finished"])
            #expect(own.entries.allSatisfy { $0.metadata["brick.operation"] == "GetStatus" && $0.level == .debug })
            #expect(own.entries.last?.metadata["http.response.status_code"] == "200")
        }
    }
}

/// A GET with its own logger and operation name.
private final class LoggedGet: Component, GETRequestType, NonAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    let logger: Logger?
    var operationName: String? { "GetStatus" }
    init(_ url: String, session: Session, logger: Logger) {
        self.urlString = url
        self.session = session
        self.logger = logger
        super.init()
    }
}
