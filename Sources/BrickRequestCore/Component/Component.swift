import FoundationEssentials

/// The base class of every endpoint: its parameters, its identity and its lifecycle.
///
/// An endpoint subclasses `Component` and adopts bricks that supply the rest:
///
/// ```swift
/// final class GetUser: Component, GETRequestType, APISessionRequestType, SoftAutoRetryType, JSONResponseType {
///     let userID: String
///     var urlString: String { "https://api.example.com/users" }
///     init(userID: String) {
///         self.userID = userID
///         var parameters = ParameterBuilder()
///         parameters.add(TextParameter(value: userID, name: "userID"))
///         super.init(parameterBuilder: parameters)
///     }
/// }
/// ```
///
/// Components are compared by identity. `Component` is deliberately not `Sendable`: a subclass would
/// otherwise have to restate `@unchecked Sendable` in every endpoint file. Requests are rendered on the
/// caller's side into a `Sendable` snapshot, and the part of the component a session touches —
/// `lifecycle` — is a `Sendable` box with one lock.
open class Component: Hashable {
    /// The request's parameters.
    public let parameterBuilder: ParameterBuilder
    /// State, retry count and the transfer in flight, shared with the session.
    @usableFromInline package let lifecycle = RequestLifecycle()
    /// The handler registered by `response(_:)`, taking the outcome before serialization; cleared
    /// when the request starts or is cancelled before it starts.
    /// (Exclusivity unchecked: a component is used from one thread at a time and this is never
    /// accessed reentrantly, so the dynamic check, ~130 instructions per request, buys nothing.)
    @exclusivity(unchecked) @usableFromInline var pendingDelivery: (@Sendable (Outcome) -> Void)?
    /// The handler registered by `progress(_:)`; taken (cleared) when the request is rendered to
    /// start, so that a handler capturing its component leaves no reference cycle behind.
    @exclusivity(unchecked) var progressHandler: (@Sendable (TransportRequest.Progress) -> Void)?
    /// Where an ``EventStreamResponseType`` request started by `events()` sends its body.
    @exclusivity(unchecked) var eventSink: EventSink?

    /// Creates a component.
    ///
    /// - Parameter parameterBuilder: The request's parameters.
    public init(parameterBuilder: ParameterBuilder = ParameterBuilder()) {
        self.parameterBuilder = parameterBuilder
    }

    /// A random key made the first time it is read and kept for the object's life: the default
    /// `Idempotency-Key` of ``IdempotentRequestType``.
    public private(set) lazy var idempotencyKeyValue: String = UUID().uuidString

    /// Retries made so far.
    public var retryCount: Int { lifecycle.retryCount }

    /// Where the request is in its life.
    public var state: RequestState { lifecycle.state }

    /// Identity: a component equals only itself.
    public static func == (lhs: Component, rhs: Component) -> Bool { lhs === rhs }

    /// Hashes the object's identity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }
}

@available(*, unavailable, message: "Component is not Sendable; render requests with resume(), response() or value")
extension Component: Sendable {}
