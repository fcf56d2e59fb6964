import FoundationEssentials

/// Signs webhooks as the Standard Webhooks specification says (standardwebhooks.com): three
/// header fields on each attempt,
///
/// - `webhook-id`: the message's identity, the same on every retry (the receiver's dedupe key);
/// - `webhook-timestamp`: the attempt's time, in Unix seconds (each attempt signed afresh);
/// - `webhook-signature`: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`, one per secret,
///   separated by spaces, so that a receiver keeps verifying while a secret is rotated.
///
/// Secrets are in the specification's form, `whsec_` + base64 of the key bytes. A signer holds
/// them in memory only: an offline queue given one signs each attempt when it sends it, and never
/// writes a secret (or a signature) to its store.
///
/// ```swift
/// let signer = try WebhookSigner(secrets: [newSecret, oldSecret])   // during a rotation
/// ```
///
/// The receiving side checks with ``verify(id:timestamp:signatures:body:now:tolerance:)`` (or
/// any Standard Webhooks library).
public struct WebhookSigner: Sendable {
    /// The key bytes of each secret, in the order given.
    private let keys: [[UInt8]]

    /// Creates a signer from one or more secrets; each attempt carries a signature per secret.
    ///
    /// - Parameter secrets: `whsec_…` secrets (the prefix may be omitted: plain base64).
    /// - Throws: ``BrickError/Code/invalidRequest`` for no secret, or one that is not base64 or is
    ///   shorter than 24 bytes (the specification asks for 24 to 64).
    public init(secrets: [String]) throws(BrickError) {
        guard !secrets.isEmpty else { throw BrickError(.invalidRequest, message: "a webhook signer needs a secret") }
        var keys: [[UInt8]] = []
        for (index, secret) in secrets.enumerated() {
            let encoded = secret.hasPrefix("whsec_") ? String(secret.dropFirst(6)) : secret
            guard let key = Data(base64Encoded: encoded), key.count >= 24 else {
                // Never the secret itself in a message.
                throw BrickError(
                    .invalidRequest,
                    message: "webhook secret \(index + 1) is not a whsec_ secret (base64 of 24 to 64 bytes)"
                )
            }
            keys.append(Array(key))
        }
        self.keys = keys
    }

    /// Creates a signer from one secret.
    ///
    /// - Parameter secret: A `whsec_…` secret.
    /// - Throws: As ``init(secrets:)``.
    public init(secret: String) throws(BrickError) {
        try self.init(secrets: [secret])
    }

    /// A new random secret in the `whsec_` form (32 bytes), to give a receiver.
    ///
    /// - Returns: The secret.
    public static func generateSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return "whsec_" + Data(bytes).base64EncodedString()
    }

    /// The value of `webhook-signature` for a message: `v1,<base64>` per secret, space-separated.
    ///
    /// - Parameters:
    ///   - id: The `webhook-id`.
    ///   - timestamp: The `webhook-timestamp`, in Unix seconds.
    ///   - body: The exact body bytes sent.
    /// - Returns: The header value.
    package func signature(id: String, timestamp: Int64, body: some Collection<UInt8>) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + Array(body)
        return keys.map { "v1," + Data(SHA256.hmac(key: $0, message: content)).base64EncodedString() }
            .joined(separator: " ")
    }

    /// The three header fields of one attempt.
    ///
    /// - Parameters:
    ///   - id: The message's identity, the same on every retry.
    ///   - date: When the attempt is sent.
    ///   - body: The exact body bytes sent.
    /// - Returns: `webhook-id`, `webhook-timestamp` and `webhook-signature`, with their values.
    public func headers(id: String, date: Date, body: some Collection<UInt8>) -> [(name: String, value: String)] {
        let seconds = date.timeIntervalSince1970
        let timestamp = seconds.isFinite ? Int64(max(min(seconds, 1e15), -1e15)) : 0
        return [
            (name: "webhook-id", value: id),
            (name: "webhook-timestamp", value: String(timestamp)),
            (name: "webhook-signature", value: signature(id: id, timestamp: timestamp, body: body)),
        ]
    }

    /// Checks a received webhook, as a receiver does: the timestamp within `tolerance` of `now`,
    /// and one of the `v1` signatures made with one of this signer's secrets (compared in
    /// constant time).
    ///
    /// - Parameters:
    ///   - id: The `webhook-id` received.
    ///   - timestamp: The `webhook-timestamp` received.
    ///   - signatures: The `webhook-signature` received.
    ///   - body: The body received, byte for byte.
    ///   - now: The receiver's time.
    ///   - tolerance: How far the timestamp may be from `now` either way. Default 5 minutes, as the
    ///     specification suggests (replays of an old message are refused).
    /// - Throws: ``BrickError/Code/authenticationFailed`` saying which check failed.
    public func verify(
        id: String,
        timestamp: String,
        signatures: String,
        body: some Collection<UInt8>,
        now: Date = Date(),
        tolerance: Duration = .seconds(300)
    ) throws(BrickError) {
        guard let seconds = Int64(timestamp) else {
            throw BrickError(.authenticationFailed, message: "the webhook-timestamp is not a number of seconds")
        }
        guard abs(Double(seconds) - now.timeIntervalSince1970) <= tolerance.seconds else {
            throw BrickError(.authenticationFailed, message: "the webhook-timestamp is too far from now (a replay, or a clock off)")
        }
        let content = Array("\(id).\(seconds).".utf8) + Array(body)
        let expected = keys.map { SHA256.hmac(key: $0, message: content) }
        for candidate in signatures.split(separator: " ") {
            let parts = candidate.split(separator: ",", maxSplits: 1)
            guard parts.count == 2, parts[0] == "v1", let received = Data(base64Encoded: String(parts[1])) else { continue }
            for mac in expected where mac.count == received.count {
                var difference: UInt8 = 0
                for (a, b) in zip(mac, received) { difference |= a ^ b }
                if difference == 0 { return }
            }
        }
        throw BrickError(.authenticationFailed, message: "no webhook-signature matches (wrong secret, or the body changed)")
    }
}

/// Signs each attempt as a Standard Webhooks message (``WebhookSigner``): `webhook-id` (the
/// endpoint's ``RequestType/idempotencyKey`` when it has one, else a key made once per request
/// object: the same on every retry), a fresh `webhook-timestamp` and `webhook-signature` per
/// attempt.
///
/// ```swift
/// final class DeliverEvent: Component, POSTRequestType, SignedWebhookType, IdempotentRequestType, DataResponseType {
///     let urlString: String
///     let webhookSigner: WebhookSigner
///     let requestBody: RequestBody?
///     var egressPolicy: EgressPolicy? { .publicInternetOnly }
///     …
/// }
/// ```
///
/// The body must be bytes in memory (``RequestBody/data(_:)``, JSON or form parameters): a file
/// or stream body fails with ``BrickError/Code/invalidRequest``. Added to an offline queue, the
/// endpoint needs a queue made with a `webhookSigner` (its secret is never stored).
public protocol SignedWebhookType: RequestType {
    /// The signer, holding the secrets.
    var webhookSigner: WebhookSigner { get }
}

extension SignedWebhookType {
    /// ``webhookSigner``.
    public var requestWebhookSigner: WebhookSigner? { webhookSigner }
}

extension TransportRequest {
    /// The body's bytes when it is held in memory (`nil` for none); throws for a file or a stream.
    package func bodyBytesForSigning() throws(BrickError) -> Data? {
        guard let segments = body?.segments else { return nil }
        var bytes = Data()
        for segment in segments {
            guard case .data(let data) = segment else {
                throw BrickError(
                    .invalidRequest,
                    message: "a signed webhook needs its body in memory (bytes, JSON or form parameters), not a file or a stream"
                )
            }
            bytes.append(data)
        }
        return bytes
    }

    /// This request with the Standard Webhooks header fields of an attempt sent at `date`.
    package func signedAsWebhook(by signer: WebhookSigner, id: String, date: Date) throws(BrickError) -> TransportRequest {
        let body = try bodyBytesForSigning() ?? Data()
        var signed = self
        do {
            let fields = try TransportRequest.validatedFields(signer.headers(id: id, date: date, body: body))
            for field in fields { signed.headerFields[field.name] = field.value }
        } catch {
            throw BrickError(.invalidRequest, message: "the webhook-id is not a valid header value", underlying: error)
        }
        return signed
    }
}
