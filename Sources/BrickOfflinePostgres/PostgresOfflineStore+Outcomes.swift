import BrickOfflineCore
import BrickRequest
import Foundation
import PostgresNIO

/// The attempts' outcomes (`complete`, `reschedule`, `bury`), written in batches: one statement and
/// one commit for every outcome that ends within 2 ms of the first, or while the previous batch is
/// being written (``GroupCommitter``), instead of one commit per entry. Each outcome is still fenced by its own lease token (a stale worker's changes nothing),
/// and each caller is resumed only once the batch holding its outcome is durable. The per-minute
/// delivery counters are summed per queue in the same statement.
extension PostgresOfflineStore {
    /// One attempt's outcome.
    package struct Outcome: Sendable {
        package enum Kind: Int64, Sendable {
            case complete = 0
            case reschedule = 1
            case bury = 2
        }

        var id: OfflineEntry.ID
        var lease: UUID
        var kind: Kind
        var notBefore = Date(timeIntervalSince1970: 0)
        var countsAttempt = false
        var attempt: OfflineEntry.AttemptRecord?
        var reason = ""
    }

    /// The most outcomes one statement carries.
    static let outcomeBatchLimit = 500
    /// How long the writer of a batch waits for more outcomes before it writes: a few
    /// milliseconds, against a delivery's round trip, buys one statement for many.
    static let outcomeWindow = Duration.milliseconds(2)

    /// Writes `outcome` with the others ending now; whether its lease still held (the entry changed).
    func write(_ outcome: Outcome) async throws -> Bool {
        try await outcomes.submit(outcome) { [self] batch in
            do {
                let changed = try await writeBatch(batch)
                return batch.map { .success(changed.contains(LeasedEntry(id: $0.id, lease: $0.lease))) }
            } catch let error as OfflineStoreError {
                return batch.map { _ in .failure(error) }
            } catch {
                let failure = Self.storeError(error, doing: "write attempt outcomes")
                return batch.map { _ in .failure(failure) }
            }
        }
    }

    /// An entry as one lease holds it.
    struct LeasedEntry: Hashable {
        var id: OfflineEntry.ID
        var lease: UUID
    }

    /// One statement for the whole batch (the schema's `settle` function, migration 6): the
    /// deletions, reschedules and burials whose lease still holds, and the counters; returns the
    /// entries it changed.
    private func writeBatch(_ batch: [Outcome]) async throws -> Set<LeasedEntry> {
        let prune = deliveryCountsPruneDue()
        let ids = batch.map(\.id)
        let leases = batch.map(\.lease)
        let kinds = batch.map(\.kind.rawValue)
        let notBefore = batch.map(\.notBefore)
        let counts = batch.map(\.countsAttempt)
        let hasAttempt = batch.map { $0.attempt != nil }
        let attemptAt = batch.map { $0.attempt?.date ?? Date(timeIntervalSince1970: 0) }
        let hasStatus = batch.map { $0.attempt?.status != nil }
        let status = batch.map { Int64($0.attempt?.status ?? 0) }
        let hasError = batch.map { $0.attempt?.error != nil }
        let error = batch.map { $0.attempt?.error ?? "" }
        let reason = batch.map(\.reason)
        let s = schema
        return try await run("write attempt outcomes") { [self] in
            var changed: Set<LeasedEntry> = []
            var queues: Set<String> = []
            // One call of the schema's `settle` (migration 6): its plans are cached by the session.
            let rows = try await client.query(
                """
                SELECT * FROM \(unescaped: s).settle(
                    \(ids)::uuid[], \(leases)::uuid[], \(kinds)::int8[], \(notBefore)::timestamptz[], \(counts)::bool[],
                    \(hasAttempt)::bool[], \(attemptAt)::timestamptz[], \(hasStatus)::bool[], \(status)::int8[],
                    \(hasError)::bool[], \(error)::text[], \(reason)::text[], \(workerName), \(prune))
                """,
                logger: logger
            )
            for try await (id, lease, queue) in rows.decode((UUID, UUID, String).self) {
                changed.insert(LeasedEntry(id: id, lease: lease))
                queues.insert(queue)
            }
            queues.forEach { madeWork(in: $0) }
            return changed
        }
    }
}
