import BrickOfflineCore
import BrickRequest
import GRDB

/// The attempts' outcomes (`complete`, `reschedule`, `bury`), written as the adds are: in one
/// transaction for every outcome that ends while the previous one commits (``GroupCommitter``),
/// instead of one transaction (and one fsync) each. Each outcome's statements are those it had
/// alone, fenced by its lease token; its caller is resumed once the transaction holding it
/// committed. Should the shared transaction fail, each outcome is written again alone, so that
/// one outcome's failure is only its own.
extension SQLiteOfflineStore {
    /// One outcome's statements; whether its lease still held.
    struct OutcomeWrite: Sendable {
        var what: String
        var statements: @Sendable (Database) throws -> Bool
    }

    func writeOutcome(_ what: String, _ statements: @Sendable @escaping (Database) throws -> Bool) async throws -> Bool {
        try await outcomeCommit.submit(OutcomeWrite(what: what, statements: statements)) { [self] batch in
            do {
                return try await pool.write { db in try batch.map { .success(try $0.statements(db)) } }
            } catch {
                guard batch.count > 1 else { return [.failure(Self.storeError(error, doing: batch[0].what))] }
                var results: [Result<Bool, OfflineStoreError>] = []
                for outcome in batch {
                    do {
                        results.append(.success(try await pool.write(outcome.statements)))
                    } catch {
                        results.append(.failure(Self.storeError(error, doing: outcome.what)))
                    }
                }
                return results
            }
        }
    }
}
