import Logging
import PostgresNIO

// PostgreSQL sends an error raised while a statement runs (a unique violation, NOTIFY's payload
// limit, a failed cast) after the statement's row description, so `query` can return before it:
// a statement whose rows are never read fails its transaction unseen, and the transaction's
// COMMIT then quietly becomes a ROLLBACK. Every statement of the store whose rows it does not
// need runs through `executeToEnd`, which reads them to the end and so throws that error.

extension PostgresConnection {
    /// Runs `query` and reads its result to its end, so that an error raised while it runs is
    /// thrown here.
    func executeToEnd(_ query: PostgresQuery, logger: Logger) async throws {
        for try await _ in try await self.query(query, logger: logger) {}
    }
}

extension PostgresClient {
    /// Runs `query` on a connection of the pool and reads its result to its end, so that an
    /// error raised while it runs is thrown here.
    func executeToEnd(_ query: PostgresQuery, logger: Logger) async throws {
        for try await _ in try await self.query(query, logger: logger) {}
    }
}
