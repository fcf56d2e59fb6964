import BrickOfflineCore
import BrickRequest
import Foundation
import Logging
import Synchronization

extension OfflineRequestManager {
    private static let managers = Lock<[String: OfflineRequestManager]>([:])

    /// The manager named ``OfflineRequestManager/defaultName`` in the default directory, made on
    /// first use (on a ``SQLiteOfflineStore``).
    public static var `default`: OfflineRequestManager {
        get throws { try manager(named: defaultName) }
    }

    /// The manager with this name in the default directory: one instance per name per process.
    public static func manager(named name: String) throws -> OfflineRequestManager {
        try managers.withLock { managers in
            if let existing = managers[name] { return existing }
            let made = try OfflineRequestManager(name: name)
            managers[name] = made
            return made
        }
    }

    /// Opens (or creates) the manager `name`, stored in `directory/name.sqlite`.
    ///
    /// - Parameters:
    ///   - name: Letters, digits, `-`, `_`, `.`.
    ///   - directory: Default ``PersistentRequestQueue/defaultDirectory``.
    ///   - session: Handed to each request's ``OfflineRequestContext``. Default `.shared`.
    ///   - simultaneousRequestCap: The most requests performed at once. Default 10.
    ///   - delegate: Decides and hears what happens; held weakly. Default none.
    ///   - logger: Where the manager logs (store failures), with `brick.manager` set. Default: the
    ///     session's logger.
    /// - Throws: ``OfflineStoreError`` when the store cannot be opened.
    public convenience init(
        name: String,
        directory: URL? = nil,
        session: Session = .shared,
        simultaneousRequestCap: Int = 10,
        delegate: (any OfflineRequestManagerDelegate)? = nil,
        logger: Logger? = nil
    ) throws {
        let store = try SQLiteOfflineStore(name: name, directory: directory ?? PersistentRequestQueue.defaultDirectory)
        self.init(name: name, store: store, session: session, simultaneousRequestCap: simultaneousRequestCap, delegate: delegate, logger: logger)
    }
}
