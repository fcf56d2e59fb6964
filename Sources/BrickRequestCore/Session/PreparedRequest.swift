import FoundationEssentials
import HTTPTypes
import Logging

/// What a session needs to run one request, apart from its serializer: the rendered request (or
/// why rendering failed), the validation, the retry configuration and the authenticator.
/// `Sendable`, built on the caller's side. Not generic, like the whole session pipeline: only the
/// last step, ``Outcome/response(_:)``, knows the value type, so running a request instantiates
/// no generic types at run time. A value: an ``Exchange`` stores it inline (one allocation per
/// request fewer); functions borrow it.
@usableFromInline
struct PreparedRequest: Sendable {
    /// The session that runs it: the request's own, or its replacement in this task
    /// (``Session/withReplacement(_:isolation:operation:)``).
    @usableFromInline let session: Session
    /// The rendered request, or why rendering failed: boxed, like the cache below. A prepared
    /// request is moved three times on its way into an exchange, and what most requests never have
    /// then costs those moves nothing (unboxed, the error and the cache took 300 of its 536 bytes).
    let rendering: Rendering
    let validation: ResponseValidation?
    var retry: AutoRetryConfiguration
    let authenticator: Authenticator?
    /// The endpoint's webhook signer and the message's `webhook-id`, when it signs
    /// (``SignedWebhookType``); boxed: most requests never have one.
    let webhook: SharedValue<Webhook>?
    /// The endpoint's cache, when it has one (boxed, as the render failure is).
    private let cachingBox: SharedValue<ResponseCaching>?
    /// The session's instruments' observers of this request; `nil` when none observes it.
    let observation: Observation?
    /// The endpoint's own ``RequestType/logger`` (`nil`, the common case, costs no copy).
    let ownLogger: Logger?
    /// Whether ``logger`` takes `debug` messages (the per-request events).
    let logsRequests: Bool
    /// Where the request logs: its endpoint's ``RequestType/logger``, or the session's.
    var logger: Logger { ownLogger ?? session.logger }
    /// The endpoint's ``RequestType/operationName``.
    let operationName: String?

    /// The outcome of rendering.
    enum Rendering: Sendable {
        /// Rendered: the request to send.
        case request(TransportRequest)
        /// Why it could not be rendered.
        case failure(SharedValue<BrickError>)
    }

    /// The endpoint's cache and policy, when it declares one.
    var caching: ResponseCaching? { cachingBox?.value }
    /// Whether the endpoint declares a cache (tested without copying it).
    var isCached: Bool { cachingBox != nil }

    @usableFromInline
    init(_ request: some RequestType) {
        let (session, imposedCache) = request.session.resolvedWithCaches
        self.session = session
        // Matched where it is returned: each copy of an optional `ResponseCaching` (177 bytes) is
        // an outlined copy through its metadata, even when it is `nil`; a misdeclaration's error
        // is boxed as soon as it is found, for the same reason.
        var misdeclared: SharedValue<BrickError>? = nil
        switch request.responseCaching {
        case .none:
            cachingBox = nil
        case .some(var caching):
            if let error = caching.misdeclared { misdeclared = SharedValue(error) }
            if let imposedCache { caching.cache = imposedCache }  // a test's replacement: never the app's cache
            cachingBox = SharedValue(caching)
        }
        var rendered: TransportRequest? = nil
        if let misdeclared {
            // A declared cache that is not one: the request fails, rather than bypass it unseen.
            rendering = .failure(misdeclared)
        } else {
            do {
                let made = try RequestRenderer.render(request, session: session, startsRequest: true)
                rendered = made
                rendering = .request(made)
            } catch {
                rendering = .failure(SharedValue(error))
            }
        }
        validation = request.responseValidation
        retry = request.autoRetryConfiguration
        authenticator = request.requestAuthenticator
        webhook = request.requestWebhookSigner.map { signer in
            SharedValue(Webhook(signer: signer, id: request.idempotencyKey ?? Webhook.id(of: request)))
        }
        let operationName = request.operationName
        self.operationName = operationName
        ownLogger = request.logger
        logsRequests = ownLogger.map { $0.logLevel <= .debug } ?? session.logsRequests
        // In the caller's context: an instrument reads its task-local values (a trace) here.
        observation = rendered.flatMap { session.observation(of: $0, operation: operationName) }
    }
}

/// How a request ended, before serialization.
@usableFromInline
struct Outcome: Sendable {
    @usableFromInline
    enum Ending: Sendable {
        /// A response that passed validation: to be serialized.
        case validated(TransportResponse)
        /// Why the request failed, with the response when one arrived (it failed validation).
        case failed(BrickError, TransportResponse?)
    }

    /// The rendered request, or `nil` when rendering failed.
    @usableFromInline var request: TransportRequest?
    @usableFromInline var ending: Ending
    @usableFromInline var retryCount: Int = 0
    /// Where the response came from, and what the cache knows of it.
    @usableFromInline var source: ResponseSource = .network
    @usableFromInline var isStale = false
    @usableFromInline var age: Duration?
    /// The date a server's `Retry-After` named when the call ended without waiting for it.
    @usableFromInline var notBefore: Date?

    /// A failure before or without a response.
    static func failed(_ error: BrickError, request: TransportRequest?, retryCount: Int = 0) -> Outcome {
        Outcome(request: request, ending: .failed(error, nil), retryCount: retryCount)
    }

    /// The typed response: serializes a validated response with `serializer`. Inlinable, so that
    /// it is specialized for the endpoint's value type where the endpoint is declared (no generic
    /// metadata lookup per response).
    @inlinable
    func response<Value: Sendable>(_ serializer: any ResponseSerializer<Value>) -> Response<Value, BrickError> {
        switch ending {
        case .validated(let response):
            let result: Result<Value, BrickError>
            do throws(BrickError) {
                result = .success(try serializer.serialize(response))
            } catch {
                result = .failure(error)
            }
            return Response(
                request: request,
                result: result,
                transportResponse: response,
                retryCount: retryCount,
                source: source,
                isStale: isStale,
                age: age,
                notBefore: notBefore
            )
        case .failed(let error, let response):
            return Response(
                request: request,
                result: .failure(error),
                transportResponse: response,
                retryCount: retryCount,
                source: source,
                isStale: isStale,
                age: age,
                notBefore: notBefore
            )
        }
    }
}

/// What signs each attempt of a ``SignedWebhookType`` endpoint.
struct Webhook: Sendable {
    let signer: WebhookSigner
    /// The `webhook-id`, the same on every attempt.
    let id: String

    /// A key made once per request object (a ``Component``'s), else a new one.
    static func id(of request: some RequestType) -> String {
        (request as? Component)?.idempotencyKeyValue ?? UUID().uuidString
    }
}
