import BrickOfflineTestSupport
import BrickOffline
import BrickTestSupport
import BrickOfflinePostgres
import Foundation
import Logging
import PostgresNIO
import Synchronization
import Testing

/// Collects every log record, for checking what reaches the logs.
final class CapturedLogs: Sendable {
    let lines = Mutex<[String]>([])

    func handler(label: String) -> some LogHandler { Handler(logs: self) }

    struct Handler: LogHandler {
        let logs: CapturedLogs
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            logs.lines.withLock { $0.append("\(event.level) \(event.message) \(event.metadata ?? [:]) \(metadata)") }
        }
    }
}

@Suite("PostgresOfflineStore: configuration, secrets and TLS", .timeLimit(.minutes(2)))
struct PostgresConfigurationTests {
    @Test("PG* variables and URLs make a configuration; what is wrong is named, never the password")
    func configurations() throws {
        let fromEnvironment = try PostgresOfflineStore.clientConfiguration(environment: [
            "PGHOST": "db.internal", "PGPORT": "6543", "PGUSER": "app", "PGPASSWORD": "hunter2-secret",
            "PGDATABASE": "orders", "PGSSLMODE": "disable",
        ])
        #expect(fromEnvironment.host == "db.internal" && fromEnvironment.port == 6543)
        #expect(fromEnvironment.username == "app" && fromEnvironment.password == "hunter2-secret")
        #expect(fromEnvironment.database == "orders")
        let fromURL = try PostgresOfflineStore.clientConfiguration(
            url: "postgres://app:p%40ss-secret@db.internal:7000/orders?sslmode=disable",
            environment: [:]
        )
        #expect(fromURL.host == "db.internal" && fromURL.port == 7000 && fromURL.password == "p@ss-secret")
        #expect(fromURL.database == "orders")
        for bad in ["mysql://app:p-secret@db/x", "postgres://:p-secret@db/x", "postgres://app:p-secret@db/x?sslmode=sometimes"] {
            do {
                _ = try PostgresOfflineStore.clientConfiguration(url: bad, environment: [:])
                Issue.record("\(bad) was accepted")
            } catch let error as OfflineStoreError {
                #expect(!"\(error)".contains("p-secret"))
            }
        }
        #expect(throws: OfflineStoreError.self) {
            try PostgresOfflineStore.clientConfiguration(environment: ["PGUSER": "app", "PGPORT": "seventy"])
        }
        // One rule for the port, whichever way it is given.
        for port in ["99999", "0"] {
            #expect(throws: OfflineStoreError.self, "PGPORT \(port)") {
                try PostgresOfflineStore.clientConfiguration(environment: ["PGUSER": "app", "PGPORT": port])
            }
            #expect(throws: OfflineStoreError.self, "URL port \(port)") {
                try PostgresOfflineStore.clientConfiguration(url: "postgres://app:p-secret@db.internal:\(port)/x", environment: [:])
            }
        }
    }

    @Test("start-up against a database that is not there fails at its start-up deadline, naming what to check")
    func startupDeadline() async throws {
        // A port nothing listens on: bound, then closed.
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe, $0, &length) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        close(probe)
        var configuration = PostgresClient.Configuration(
            host: "127.0.0.1", port: port, username: "brick", password: "secret-\(UUID())", database: "brick", tls: .disable
        )
        configuration.options.connectTimeout = .seconds(1)
        let client = RunningClient(configuration)
        defer { client.shutdown() }
        do {
            _ = try await PostgresOfflineStore(client: client.client, schema: PostgresFixture.freshSchema(), startupDeadline: .seconds(2))
            Issue.record("a store opened on a port where nothing listens")
        } catch let error as OfflineStoreError {
            #expect(error.kind == .io)
            #expect(error.message.contains("within 2"), "\(error)")
            #expect(error.message.contains("could not make a connection"), "\(error)")
            #expect(error.message.contains("client.run()"), "\(error)")
            #expect(!"\(error)".contains("secret-"))
        }
    }

    @Test("a wrong password fails with a clear error, and neither the error nor the logs hold the password")
    func wrongPassword() async throws {
        let server = try await PostgresFixture.server()
        let logs = CapturedLogs()
        let secret = "not-the-password-\(UUID().uuidString)"
        var configuration = server.configuration()
        configuration.password = secret
        configuration.options.connectTimeout = .seconds(5)
        var logger = Logger(label: "secrets", factory: { logs.handler(label: $0) })
        logger.logLevel = .trace
        let client = RunningClient(configuration, backgroundLogger: logger)
        defer { client.shutdown() }
        do {
            _ = try await PostgresOfflineStore(client: client.client, schema: PostgresFixture.freshSchema(), logger: logger)
            Issue.record("a wrong password was accepted")
        } catch let error as OfflineStoreError {
            #expect(error.kind == .io)
            #expect(error.message.contains("could not make a connection"), "\(error)")
            #expect(!"\(error)".contains(secret))
            #expect(!String(reflecting: error).contains(secret))
        }
        let lines = logs.lines.withLock { $0 }
        #expect(!lines.contains { $0.contains(secret) })
        // The client's logger says why (the server's 28P01, authentication failed).
        #expect(lines.contains { $0.contains("28P01") || $0.lowercased().contains("authentication") }, "\(lines.suffix(3))")
    }

    @Test("a store's description names its schema and worker, not its connection")
    func description() async throws {
        try await withFleetStore { store, _ in
            let server = try await PostgresFixture.server()
            #expect("\(store)".contains(store.schema))
            #expect(!"\(store)".contains(server.password))
            #expect(!String(reflecting: store).contains(server.password))
        }
    }

    @Test("sslmode=require against a server without TLS is refused, not sent in clear; the client's log says why")
    func tlsRequired() async throws {
        let server = try await PostgresFixture.server()
        var environment = server.environment
        environment["PGSSLMODE"] = "require"
        var configuration = try PostgresOfflineStore.clientConfiguration(environment: environment)
        configuration.options.connectTimeout = .seconds(5)
        let logs = CapturedLogs()
        var logger = Logger(label: "tls", factory: { logs.handler(label: $0) })
        logger.logLevel = .trace
        let client = RunningClient(configuration, backgroundLogger: logger)
        defer { client.shutdown() }
        do {
            _ = try await PostgresOfflineStore(client: client.client, schema: PostgresFixture.freshSchema())
            Issue.record("connected without TLS")
        } catch let error as OfflineStoreError {
            #expect(error.message.contains("could not make a connection"), "\(error)")
            #expect(!"\(error)".contains(server.password))
        }
        let lines = logs.lines.withLock { $0 }
        #expect(lines.contains { $0.lowercased().contains("ssl") }, "\(lines.suffix(3))")
        #expect(!lines.contains { $0.contains(server.password) })
    }

    @Test("a schema name that is not a plain identifier is refused before any SQL")
    func schemaNames() async throws {
        try await withFleetStore { _, client in
            for bad in ["Brick", "brick; DROP TABLE x", "", "1brick", String(repeating: "a", count: 59)] {
                await #expect(throws: OfflineStoreError.self) {
                    _ = try await PostgresOfflineStore(client: client.client, schema: bad, startupDeadline: PostgresFixture.startupDeadline)
                }
            }
        }
    }
}

@Suite("A store call's deadline", .timeLimit(.minutes(3)))
struct CallDeadlineTests {
    @Test("a call that never answers fails at its deadline with an error that says so; one that answers returns its value")
    func deadline() async throws {
        do {
            _ = try await CallDeadline.run("wait for nothing", limit: .milliseconds(100)) { () async throws -> Int in
                // Never answers, and ignores cancellation, as a query on a dead connection might.
                await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
                return 1
            }
            Issue.record("a call with no answer returned")
        } catch let error as OfflineStoreError {
            #expect(error.kind == .io)
            #expect(error.message.contains("no answer from the database"))
        }
        #expect(try await CallDeadline.run("answer", limit: .seconds(10)) { 42 } == 42)
    }

    @Test("cancelling the caller ends the call at once")
    func cancellation() async throws {
        let caller = Task {
            try await CallDeadline.run("wait for nothing", limit: .seconds(3600)) { () async throws -> Int in
                await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
                return 1
            }
        }
        caller.cancel()
        await #expect(throws: CancellationError.self) { _ = try await caller.childValue }
    }
}
