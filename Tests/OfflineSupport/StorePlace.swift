import BrickOffline
import Foundation
import Testing
#if !BRICK_SQLITE_ONLY
import BrickOfflinePostgres
import Synchronization
#endif

// The store a scenario runs on. Scripts/sanitize.sh builds these suites without PostgreSQL
// (BRICK_SQLITE_ONLY): the sanitizers watch our code, and postgres-nio's build would double theirs.

/// Which store a scenario runs on.
package enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    #if !BRICK_SQLITE_ONLY
    case postgres
    #endif
    package var testDescription: String { self == .sqlite ? "SQLite" : "PostgreSQL" }
}

/// Where a test's store lives — a directory or a schema — opened as often as the test restarts
/// (a new store object each time, as a new process would make).
package final class StorePlace: Sendable {
    package let kind: StoreKind
    package let directory: URL
    package let schema: String
    #if !BRICK_SQLITE_ONLY
    private let clients = Mutex<[RunningClient]>([])
    #endif

    package init(kind: StoreKind, directory: URL) {
        self.kind = kind
        self.directory = directory
        #if BRICK_SQLITE_ONLY
        self.schema = ""
        #else
        self.schema = PostgresFixture.freshSchema()
        #endif
    }

    #if BRICK_SQLITE_ONLY
    /// Opens the store `name`, a file in the place's directory.
    package func open(_ name: String, leaseDuration: Duration = .seconds(10)) async throws -> any OfflineStore {
        try await SQLiteOfflineStore.open(name: name, directory: directory)
    }

    package func shutdown() {}
    #else

    /// Opens the store `name` (a file for SQLite; the place's schema for PostgreSQL).
    package func open(
        _ name: String,
        leaseDuration: Duration = .seconds(10),
        wakeUps: PostgresOfflineStore.WakeUps = .notify()
    ) async throws -> any OfflineStore {
        switch kind {
        case .sqlite:
            return try await SQLiteOfflineStore.open(name: name, directory: directory)
        case .postgres:
            let client = RunningClient(try await PostgresFixture.server().configuration())
            clients.withLock { $0.append(client) }
            return try await PostgresOfflineStore(
                client: client.client, schema: schema, leaseDuration: leaseDuration, wakeUps: wakeUps,
                startupDeadline: PostgresFixture.startupDeadline
            )
        }
    }

    package func shutdown() {
        clients.withLock { clients in
            clients.forEach { $0.shutdown() }
            clients = []
        }
    }
    #endif
}

/// Runs `body` with a fresh place for a store of `kind`, cleaned up afterwards.
package func withStorePlace<T>(_ kind: StoreKind, _ body: (StorePlace) async throws -> T) async throws -> T {
    try await withDirectory { directory in
        let place = StorePlace(kind: kind, directory: directory)
        defer { place.shutdown() }
        return try await body(place)
    }
}
