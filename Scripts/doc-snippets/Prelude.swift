// What the DocC articles take for granted: the example endpoints and sessions they use without
// declaring. A module of its own, so an article's own declaration of a name wins over these.
@_exported import BrickOffline
@_exported import BrickRequest
@_exported import BrickTesting
@_exported import Foundation
@_exported import Logging
@_exported import Testing

extension Session {
    /// The README's API session.
    public static let api = Session(configuration: .init(defaultHeaders: ["Accept": "application/json"]))
}

/// A session brick, as the README declares it.
public protocol APISessionRequestType: SessionRequestType {}
extension APISessionRequestType {
    public var session: Session { Session.api }
}

/// The README's GET endpoint.
public final class GetUser: Component, GETRequestType, APISessionRequestType, SoftAutoRetryType, JSONResponseType {
    public let userID: String
    public var urlString: String { "https://api.example.com/users" }
    public init(userID: String) {
        self.userID = userID
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: userID, name: "userID"))
        super.init(parameterBuilder: parameters)
    }
}

/// The README's POST endpoint for the offline queue.
public final class RecordSale: Component, POSTRequestType, APISessionRequestType {
    public var urlString: String { "https://api.example.com/sales" }
    public init(amount: Int) {
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: amount, name: "amount"))
        super.init(parameterBuilder: parameters)
    }
}

/// An `OfflineRequest` of the app's.
public struct UploadPhoto: OfflineRequest {
    public static let kind = "upload-photo"
    public var path: String
    public init(path: String) { self.path = path }
    public func perform(_ context: OfflineRequestContext) async throws {}
}

/// A model the caching article decodes.
public struct Timeline: Decodable, Sendable {}

/// What an app does with a response: show it.
public func render(_ value: some Any, stale: Bool = false) {}

/// What an app shows when it answers from its cache offline.
public func showOfflineBanner(age: Duration? = nil) {}

/// The user ids a snippet fetches.
public let ids = ["100", "101"]

/// An incremental parser of the app's, fed the bytes of a streamed body.
public final class EventParser: Sendable {
    public init() {}
    public func feed(_ bytes: UnsafeRawBufferPointer) {}
}

/// A download endpoint of the app's.
public final class DownloadBackup: Component, GETRequestType, APISessionRequestType, DownloadResponseType {
    public let downloadDestination: URL
    public var urlString: String { "https://api.example.com/backup" }
    public init(to destination: URL) {
        downloadDestination = destination
        super.init()
    }
}

/// Where a download goes.
public let file = URL(fileURLWithPath: "/tmp/backup.tar")

/// A progress bar of the app's.
public final class ProgressBar: Sendable {
    public func update(_ done: Int64, of total: Int64) {}
}

/// The app's progress bar.
public let bar = ProgressBar()

/// The app's logger.
public let logger = Logger(label: "app")

/// An order's id.
public let id = 42

/// An endpoint the fleet article queues in the outbox.
public final class NotifyPartner: Component, POSTRequestType, APISessionRequestType {
    public var urlString: String { "https://partner.example.com/orders" }
    public init(order: Int) {
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: order, name: "order"))
        super.init(parameterBuilder: parameters)
    }
}

/// An endpoint the manager's example request sends.
public final class SendPing: Component, POSTRequestType, APISessionRequestType, DataResponseType {
    public var urlString: String { "https://api.example.com/ping" }
    public init(n: Int) {
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: n, name: "n"))
        super.init(parameterBuilder: parameters)
    }
}
