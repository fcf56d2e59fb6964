import BrickOfflineCore
import BrickRequest
import Foundation
import Logging

extension PersistentRequestQueue {
    /// Opens (or creates) the queue `name`, stored in `directory/name.sqlite`.
    ///
    /// - Parameters:
    ///   - name: The queue's name: letters, digits, `-`, `_`, `.`.
    ///   - directory: Where its store lives. Default ``defaultDirectory``.
    ///   - session: Sends the requests. Default `.shared`.
    ///   - retryInterval: How long a failed entry waits. Default 30 s.
    ///   - authenticator: Signs each attempt; `nil` for none.
    ///   - sensitiveHeaders: Header names, besides `Authorization`, `Cookie` and
    ///     `Proxy-Authorization`, that `add` refuses to store (an API key header).
    ///   - synchronous: How hard each commit is synced. Default ``SQLiteOfflineStore/Synchronous/full``.
    ///   - simultaneousRequestCap: The most entries attempted at once. Default 1.
    ///   - logger: Where the queue logs (dead letters, store failures, a damaged store moved
    ///     aside), with `brick.queue` set. Default: the session's logger.
    /// - Throws: ``OfflineStoreError`` when the store cannot be opened.
    public convenience init(
        name: String,
        directory: URL? = nil,
        session: Session = .shared,
        retryInterval: Duration = .seconds(30),
        authenticator: Authenticator? = nil,
        sensitiveHeaders: Set<String> = [],
        synchronous: SQLiteOfflineStore.Synchronous = .full,
        simultaneousRequestCap: Int = 1,
        logger: Logger? = nil
    ) throws {
        let store = try SQLiteOfflineStore(
            name: name,
            directory: directory ?? Self.defaultDirectory,
            synchronous: synchronous
        )
        self.init(
            name: name,
            store: store,
            session: session,
            retryInterval: retryInterval,
            authenticator: authenticator,
            sensitiveHeaders: sensitiveHeaders,
            simultaneousRequestCap: simultaneousRequestCap,
            logger: logger
        )
        if let moved = store.recoveredFile { reportRecoveredStore(movedAside: moved) }
    }
}
