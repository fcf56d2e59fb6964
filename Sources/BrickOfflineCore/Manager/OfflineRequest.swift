import BrickRequest
import Foundation

/// A unit of work that must eventually succeed: stored by an ``OfflineRequestManager`` until it
/// does, and performed when the network allows (OfflineRequestManager's model).
///
/// ```swift
/// struct UploadPhoto: OfflineRequest {
///     static let kind = "app.upload-photo"     // stable across releases: how a stored entry finds its type
///     let path: String
///     func perform(_ context: OfflineRequestContext) async throws {
///         try await Upload(path: path, session: context.session).progress { context.updateProgress($0.fraction) }.value
///     }
/// }
/// ```
///
/// The request is stored as JSON (its `Codable` form) under ``kind``: register each type with
/// ``OfflineRequestManager/register(_:)`` so a stored entry can be read back after a restart.
/// Never put a credential in its properties: they are written to disk.
public protocol OfflineRequest: Codable, Sendable {
    /// The type's stable name in the store.
    static var kind: String { get }
    /// Does the work once. Throwing a network-class error (no route, cannot connect, timed out,
    /// connection lost) keeps the request for later; any other error fails it, unless
    /// ``shouldAttemptResubmission(for:)`` or the delegate asks for another attempt.
    func perform(_ context: OfflineRequestContext) async throws
    /// Whether to attempt again at once after a failure that is not network-class (for example
    /// after fixing its own data). Default `false`.
    func shouldAttemptResubmission(for error: any Error) -> Bool
}

extension OfflineRequest {
    /// Default: a failure that is not network-class is final.
    public func shouldAttemptResubmission(for error: any Error) -> Bool { false }
}

/// What a running ``OfflineRequest`` may tell its manager.
public final class OfflineRequestContext: Sendable {
    /// The entry being performed.
    public let id: OfflineEntry.ID
    /// The manager's session, for the request's own calls.
    public let session: Session
    private let onProgress: @Sendable (Double) -> Void
    private let onHeartbeat: @Sendable () -> Void

    init(
        id: OfflineEntry.ID,
        session: Session,
        onProgress: @escaping @Sendable (Double) -> Void,
        onHeartbeat: @escaping @Sendable () -> Void
    ) {
        self.id = id
        self.session = session
        self.onProgress = onProgress
        self.onHeartbeat = onHeartbeat
    }

    /// Reports this request's progress, 0 to 1.
    public func updateProgress(_ fraction: Double) { onProgress(min(max(fraction, 0), 1)) }

    /// Restarts this attempt's time limit (``OfflineRequestManager/requestTimeLimit``): for long
    /// requests made of several steps.
    public func sendHeartbeat() { onHeartbeat() }
}

/// What happens in an ``OfflineRequestManager``.
public enum OfflineRequestEvent: Sendable {
    /// An attempt started (also each retry).
    case started(OfflineEntry.ID, kind: String)
    /// The overall progress: (completed + the running requests' fractions) / all of the batch; 1 when idle.
    case progress(Double)
    /// A request succeeded and was removed.
    case finished(OfflineEntry.ID)
    /// A request failed for good (set aside as a dead letter): the error's description.
    case failed(OfflineEntry.ID, error: String)
    /// A network-class failure: the request is kept for when the destination is reachable.
    case kept(OfflineEntry.ID, error: String)
    /// Reachability changed.
    case connectivityChanged
    /// The store could not be read or written (or refused a write because the request's lease was
    /// lost); what happened is in the text, and in the session's log.
    case storeFailed(String)
}

/// The error of an attempt that ran past ``OfflineRequestManager/requestTimeLimit`` without a
/// heartbeat: code -1, "Offline Request Timed Out" (the identity the iOS OfflineRequestManager gives it).
public struct OfflineRequestTimeout: Error, Sendable, CustomStringConvertible {
    /// -1.
    public let code = -1
    /// "Offline Request Timed Out".
    public var description: String { "Offline Request Timed Out" }

    /// The error, as the manager makes it (for tests and decisions of one's own).
    package init() {}
}

/// Decides what an ``OfflineRequestManager`` does; every method has a default.
public protocol OfflineRequestManagerDelegate: AnyObject, Sendable {
    /// Whether to start `request` now (`false`: it stays queued). Default `true`.
    func offlineRequestManager(_ manager: OfflineRequestManager, shouldAttempt request: any OfflineRequest) -> Bool
    /// After a failure that is not network-class: whether to attempt again. Default `false`.
    func offlineRequestManager(
        _ manager: OfflineRequestManager,
        shouldReattempt request: any OfflineRequest,
        after error: any Error
    ) -> Bool
    /// An attempt started.
    func offlineRequestManager(_ manager: OfflineRequestManager, didStart request: any OfflineRequest)
    /// A request succeeded.
    func offlineRequestManager(_ manager: OfflineRequestManager, didFinish request: any OfflineRequest)
    /// A request failed for good.
    func offlineRequestManager(_ manager: OfflineRequestManager, didFail request: any OfflineRequest, with error: any Error)
    /// The overall progress changed.
    func offlineRequestManager(_ manager: OfflineRequestManager, didUpdateProgress progress: Double)
}

extension OfflineRequestManagerDelegate {
    /// Default `true`.
    public func offlineRequestManager(_ manager: OfflineRequestManager, shouldAttempt request: any OfflineRequest) -> Bool {
        true
    }
    /// Default `false`.
    public func offlineRequestManager(
        _ manager: OfflineRequestManager,
        shouldReattempt request: any OfflineRequest,
        after error: any Error
    ) -> Bool { false }
    /// Default: nothing.
    public func offlineRequestManager(_ manager: OfflineRequestManager, didStart request: any OfflineRequest) {}
    /// Default: nothing.
    public func offlineRequestManager(_ manager: OfflineRequestManager, didFinish request: any OfflineRequest) {}
    /// Default: nothing.
    public func offlineRequestManager(
        _ manager: OfflineRequestManager,
        didFail request: any OfflineRequest,
        with error: any Error
    ) {}
    /// Default: nothing.
    public func offlineRequestManager(_ manager: OfflineRequestManager, didUpdateProgress progress: Double) {}
}
