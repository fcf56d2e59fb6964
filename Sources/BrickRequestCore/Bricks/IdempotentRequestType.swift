/// Sends an `Idempotency-Key` header, generated once per request object and the same on every
/// retry, so the server can recognise a repeat. It is what lets a `POST` or `PATCH` be retried.
///
/// ```swift
/// final class CreateOrder: Component, POSTRequestType, IdempotentRequestType, HardAutoRetryType, JSONResponseType { … }
/// ```
public protocol IdempotentRequestType: RequestType {}

extension IdempotentRequestType {
    /// A UUID made once per request object (``Component/idempotencyKeyValue``).
    public var idempotencyKey: String? {
        (self as? Component)?.idempotencyKeyValue
    }
}
