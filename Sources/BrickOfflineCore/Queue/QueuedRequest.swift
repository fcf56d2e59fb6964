import BrickRequest
import Foundation
import HTTPTypes

/// The request an offline queue stored for an entry, read back: what its next attempt sends,
/// before the queue's authenticator, webhook signer and idempotency key are added.
///
/// Credentials are never in it: a queue refuses to store a request that carries one
/// (`Authorization`, `Cookie`, `Proxy-Authorization`, and the queue's `sensitiveHeaders`), and
/// reading one back leaves out any such field an older or hand-written row might hold. A query
/// string, which the endpoint chose to send, is kept as stored: ``redactedURL`` is the form to log.
///
/// ```swift
/// for entry in try await queue.deadLetters() {
///     let request = try entry.queuedRequest()
///     print(request.method, request.redactedURL, request.body?.count ?? 0)
/// }
/// ```
public struct QueuedRequest: Sendable, Hashable {
    /// The method.
    public let method: HTTPRequest.Method
    /// The URL, as stored (query included).
    public let url: String
    /// The header fields, as stored, in order; never a credential.
    public let headerFields: HTTPFields
    /// The body's bytes (a file body was read when the entry was added), or `nil`.
    public let body: Data?

    /// The URL as telemetry and the operator's tools show it: no `user:password@`, no query.
    public var redactedURL: String {
        (try? TransportRequest(method: method, url: url))?.redactedURL ?? "(an unreadable URL)"
    }

    init(_ stored: StoredRequest) throws(BrickError) {
        guard let method = HTTPRequest.Method(stored.method) else {
            throw BrickError(.invalidRequest, message: "the stored method \(stored.method.debugDescription) is not a method")
        }
        var fields = HTTPFields()
        for pair in stored.headers where pair.count == 2 {
            guard let name = HTTPField.Name(pair[0]), !CredentialFields.names.contains(name.canonicalName) else { continue }
            fields.append(HTTPField(name: name, value: pair[1]))
        }
        self.method = method
        self.url = stored.url
        self.headerFields = fields
        self.body = stored.body
    }
}

extension OfflineEntry {
    /// The request this entry holds, read back (method, URL, header fields, body).
    ///
    /// - Throws: `BrickError` (`.invalidRequest`) when the entry holds no stored request — an
    ///   ``OfflineRequestManager`` entry holds its ``OfflineRequest``'s own payload — or one of a
    ///   later release's format, or a row that does not read as one.
    public func queuedRequest() throws(BrickError) -> QueuedRequest {
        try QueuedRequest(storedRequest())
    }

    /// The stored request this entry holds, decoded.
    fileprivate func storedRequest() throws(BrickError) -> StoredRequest {
        do {
            return try StoredRequest.decoded(payload)
        } catch let error as BrickError {
            throw error
        } catch {
            throw BrickError(
                .invalidRequest,
                message: "entry \(id) holds no request a queue stored (a manager's entry, or an unreadable row)",
                underlying: error
            )
        }
    }
}

/// A URL prefix replaced by another: a dead letter's request pointed at a new address
/// (`brick-queue retry --rewrite-url OLD=NEW`, the console's "Retry at a new URL").
///
/// The prefix is matched on the URL as stored, character for character: give at least the
/// scheme and host (`https://old.partner.example/hooks=https://partner.example/v2/hooks`).
public struct URLRewrite: Sendable, Hashable, CustomStringConvertible {
    /// What the URL starts with.
    public let prefix: String
    /// What replaces it.
    public let replacement: String

    /// A rewrite of URLs starting with `prefix`.
    ///
    /// - Throws: `BrickError` (`.invalidRequest`) when either side is not the start of an
    ///   `http://` or `https://` URL with a host.
    public init(prefix: String, replacement: String) throws(BrickError) {
        for (side, text) in [("the prefix", prefix), ("the replacement", replacement)] {
            let lowered = text.lowercased()
            guard let schemeEnd = lowered.range(of: "://"),
                  ["http", "https"].contains(lowered[..<schemeEnd.lowerBound]),
                  !lowered[schemeEnd.upperBound...].isEmpty
            else {
                throw BrickError(
                    .invalidRequest,
                    message: "\(side) \(text.debugDescription) is not the start of an http:// or https:// URL with its host"
                )
            }
        }
        self.prefix = prefix
        self.replacement = replacement
    }

    /// Parses `OLD=NEW` (the first `=` separates them).
    public init(parsing text: String) throws(BrickError) {
        guard let separator = text.firstIndex(of: "=") else {
            throw BrickError(.invalidRequest, message: "\(text.debugDescription) is not OLD=NEW (a URL prefix and its replacement)")
        }
        try self.init(prefix: String(text[..<separator]), replacement: String(text[text.index(after: separator)...]))
    }

    /// `url` with its prefix replaced, or `nil` when it does not start with ``prefix``.
    public func rewritten(_ url: String) -> String? {
        guard url.hasPrefix(prefix) else { return nil }
        return replacement + url.dropFirst(prefix.count)
    }

    /// `OLD=NEW`.
    public var description: String { "\(prefix)=\(replacement)" }
}

extension URLRewrite {
    /// Whether the request `entry` holds goes to a URL that starts with ``prefix`` (`false` for an
    /// entry that holds no stored request).
    package func applies(to entry: OfflineEntry) -> Bool {
        (try? entry.storedRequest()).map { $0.url.hasPrefix(prefix) } ?? false
    }

    /// The request `entry` holds, at its rewritten URL: the payload to store, and the request read
    /// back from it. Checked as an add checks a request (the new URL must be one).
    ///
    /// - Throws: `BrickError` (`.invalidRequest`) when the entry holds no stored request, its URL
    ///   does not start with ``prefix``, or the rewritten URL is not one.
    package func apply(to entry: OfflineEntry) throws(BrickError) -> (payload: Data, request: QueuedRequest) {
        var stored = try entry.storedRequest()
        guard let url = rewritten(stored.url) else {
            let shown = (try? QueuedRequest(stored).redactedURL) ?? "its URL"
            throw BrickError(.invalidRequest, message: "\(shown) does not start with \(prefix)")
        }
        stored.url = url
        do {
            _ = try stored.transportRequest(idempotencyKey: entry.idempotencyKey, credential: [:])
        } catch {
            throw BrickError(.invalidRequest, message: "\(url.debugDescription) is not a URL a request can go to", underlying: error)
        }
        return (try stored.encoded(), try QueuedRequest(stored))
    }
}

extension InspectableOfflineStore {
    /// Makes the dead letter `id` pending again, due at `now`, with its request's URL rewritten:
    /// the same method, header fields, body, idempotency key and limits, at the new address.
    ///
    /// - Returns: The request it will send (``QueuedRequest/redactedURL`` to show).
    /// - Throws: ``OfflineStoreError`` (`.notFound`) when `id` is no dead letter (or changed
    ///   meanwhile); `BrickError` (`.invalidRequest`) when it holds no stored request, its URL
    ///   does not start with the rewrite's prefix, or the rewritten URL is not one. Nothing
    ///   changes when it throws.
    public func retryDeadLetter(_ id: OfflineEntry.ID, rewritingURL rewrite: URLRewrite, now: Date) async throws -> QueuedRequest {
        guard let entry = try await entry(id), entry.deadLetter != nil else {
            throw OfflineStoreError(.notFound, message: "no dead letter \(id)")
        }
        return try await retryDeadLetter(entry, rewrittenBy: rewrite, now: now)
    }

    /// ``retryDeadLetter(_:rewritingURL:now:)`` for a dead letter already read: nothing changes
    /// when it changed since.
    package func retryDeadLetter(_ entry: OfflineEntry, rewrittenBy rewrite: URLRewrite, now: Date) async throws -> QueuedRequest {
        let rewritten = try rewrite.apply(to: entry)
        try await retryDeadLetter(entry.id, replacingPayload: entry.payload, with: rewritten.payload, now: now)
        return rewritten.request
    }
}
