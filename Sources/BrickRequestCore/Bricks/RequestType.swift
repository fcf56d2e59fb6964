public import Logging

/// The root brick: everything needed to render a request.
///
/// Every requirement except ``urlString`` and ``method`` has a default; bricks supply the rest, and an
/// endpoint can override any of them with its own property.
public protocol RequestType: AnyObject {
    /// The HTTP method (supplied by a method brick such as ``GETRequestType``).
    var method: HTTPRequest.Method { get }
    /// The absolute URL, without the parameters (they are encoded by ``parameterEncoding``).
    var urlString: String { get }
    /// The session that runs the request. Default `Session.shared` (given by `import BrickRequest`).
    var session: Session { get }
    /// How the request retries. Default ``AutoRetryConfiguration/init(breakTime:maxRetryCount:enableBackgroundRetry:failWhenNotReachable:backoff:retryableStatusCodes:honorsRetryAfter:maxTotalDuration:rule:)``.
    var autoRetryConfiguration: AutoRetryConfiguration { get }
    /// Header fields added to the session's defaults (a value here wins). Default none.
    var headers: [String: String] { get }
    /// Limit for the whole request, or `nil` for the session's. Default `nil`.
    var timeout: Duration? { get }
    /// How parameters are encoded. Default ``ParameterEncoding/automatic``.
    var parameterEncoding: ParameterEncoding { get }
    /// The type of ``jsonBody``, inferred from your declaration, whatever its spelling:
    /// `var jsonBody: NewTodo? { … }`, `NewTodo`, `any Encodable & Sendable` or an optional of it
    /// — each is sent as declared. A type that is not `Encodable` fails the request with
    /// ``BrickError/Code/invalidRequest`` naming it. Default `NoJSONBody?` (none).
    ///
    /// Unconstrained on purpose: constrained to `Encodable`, the spellings `NewTodo` (not
    /// optional) and `any Encodable & Sendable` compiled and were silently ignored (an existential
    /// does not conform to its protocol, and a non-optional property does not witness an optional
    /// requirement), so the text parameters went out instead.
    associatedtype JSONBody: Sendable = NoJSONBody?
    /// The JSON body for ``ParameterEncoding/json``; `nil` (of an optional) sends the text
    /// parameters as a JSON object.
    var jsonBody: JSONBody { get }
    /// Response validation, or `nil` for none. Default `nil`; ``ValidatedResponseType`` supplies one.
    var responseValidation: ResponseValidation? { get }
    /// The `Idempotency-Key` to send, or `nil` for none. Default `nil`; ``IdempotentRequestType``
    /// supplies one that stays the same across retries.
    var idempotencyKey: String? { get }
    /// The authenticator that signs each attempt, or `nil`. Default `nil`;
    /// ``AuthenticatedRequestType`` supplies one.
    var requestAuthenticator: Authenticator? { get }
    /// Where the response body goes: collected in memory (``TransportResponse/body``), written to a
    /// file, or lent to a ``ResponseBodyStream`` piece by piece. Default
    /// ``TransportRequest/ResponseDestination/memory``; ``DownloadResponseType`` supplies a file.
    var responseDestination: TransportRequest.ResponseDestination { get }
    /// The largest response body accepted, in decoded bytes, or `nil` for the session's
    /// (`CurlTransport.Configuration.maxResponseSize`, 256 MiB by default). Default `nil`; raise
    /// it for a download larger than that, lower it for an endpoint that should answer little.
    var maxResponseSize: Int64? { get }
    /// Whether redirects are followed (within the session's redirect policy). Default `true`;
    /// `false` delivers the redirect itself, to read its `Location` (an OAuth callback, a
    /// pre-signed upload URL).
    var followsRedirects: Bool { get }
    /// How the request uses a response cache, or `nil` for not at all. Default `nil`;
    /// ``CachedResponseType`` supplies one.
    var responseCaching: ResponseCaching? { get }
    /// A name for what the endpoint does (`"GetUser"`), for spans, metrics and logs, or `nil`.
    /// Keep it low in cardinality — a name per endpoint type, never per URL: a trace names the
    /// request's span after it, and metrics carry it as `brick.operation`. Default `nil` (spans
    /// are named after the method, as OpenTelemetry's HTTP conventions say).
    var operationName: String? { get }
    /// A body of your own — bytes, a file, a stream (``RequestBodySource``) — sent as it is, with
    /// the `Content-Type` of your ``headers``; text parameters then go in the query. Default `nil`:
    /// the body is made from the parameters by ``parameterEncoding``.
    var requestBody: RequestBody? { get }
    /// Where this request logs, or `nil` for its session's ``Session/logger``. Default `nil`. Its
    /// level is read when the request is prepared.
    var logger: Logger? { get }
    /// Which addresses this endpoint may reach, or `nil` for its session's
    /// (``Session/Configuration/egressPolicy``). Default `nil`; an endpoint that posts to a URL
    /// a user gave returns ``EgressPolicy/publicInternetOnly``.
    var egressPolicy: EgressPolicy? { get }
    /// The signer that signs each attempt as a Standard Webhooks message, or `nil`. Default
    /// `nil`; ``SignedWebhookType`` supplies its ``SignedWebhookType/webhookSigner``.
    var requestWebhookSigner: WebhookSigner? { get }
}

extension RequestType {
    /// The default configuration (5 retries, 5 s apart, idempotent methods only).
    public var autoRetryConfiguration: AutoRetryConfiguration { .default }
    /// No extra headers.
    public var headers: [String: String] { [:] }
    /// The session's timeout.
    public var timeout: Duration? { nil }
    /// ``ParameterEncoding/automatic``.
    public var parameterEncoding: ParameterEncoding { .automatic }
    /// No validation.
    public var responseValidation: ResponseValidation? { nil }
    /// No key.
    public var idempotencyKey: String? { nil }
    /// No authenticator.
    public var requestAuthenticator: Authenticator? { nil }
    /// In memory.
    public var responseDestination: TransportRequest.ResponseDestination { .memory }
    /// The session's limit.
    public var maxResponseSize: Int64? { nil }
    /// Redirects are followed.
    public var followsRedirects: Bool { true }
    /// No cache.
    public var responseCaching: ResponseCaching? { nil }
    /// None.
    public var operationName: String? { nil }
    /// The session's.
    public var logger: Logger? { nil }
    /// None: the parameters make the body.
    public var requestBody: RequestBody? { nil }
    /// The session's.
    public var egressPolicy: EgressPolicy? { nil }
    /// None.
    public var requestWebhookSigner: WebhookSigner? { nil }
}

extension RequestType where JSONBody == NoJSONBody? {
    /// None: text parameters become the JSON object.
    public var jsonBody: NoJSONBody? { nil }
}

/// What a ``RequestType/jsonBody`` declaration holds, whatever its spelling.
enum DeclaredJSONBody {
    /// A value to encode.
    case value(any Encodable)
    /// None (`nil`, or ``NoJSONBody``): the text parameters make the object.
    case none
    /// A declared type that is not `Encodable` (its name).
    case notEncodable(String)

    init<Declared>(_ declared: Declared) {
        if case Optional<Any>.none = declared as Any {
            self = .none
        } else if declared is NoJSONBody {
            self = .none
        } else if let value = declared as? any Encodable {
            self = .value(value)
        } else {
            self = .notEncodable(String(describing: Declared.self))
        }
    }
}

/// The ``RequestType/JSONBody`` of a request that declares no ``RequestType/jsonBody``: never sent.
public struct NoJSONBody: Encodable, Sendable, Hashable {}
