import BrickRequest
import Foundation
import HTTPTypes

/// A rendered request as an offline queue stores it: method, URL, header fields and body bytes,
/// as JSON. Never a credential (``check(_:sensitiveHeaders:)`` refuses them before anything is
/// written); a file body is read when the entry is added (a snapshot, as the request was then).
package struct StoredRequest: Codable, Sendable, Hashable {
    /// The format's version, for entries written by a later release.
    package var version = 1
    package var method: String
    package var url: String
    package var headers: [[String]]
    package var body: Data?
    /// The endpoint's own limits, kept so that every attempt obeys them (absent in entries written
    /// before they were kept: the transport's defaults then apply).
    var timeoutSeconds: Double?
    var maxResponseSize: Int64?
    var followsRedirects: Bool?
    /// The endpoint's own egress policy (``RequestType/egressPolicy``), kept so that a queue
    /// whose session is less strict still obeys it; absent: the delivering session's.
    var egressPolicy: EgressPolicy?

    /// The largest body an entry holds.
    static let maxBodyBytes = 16 << 20

    /// Snapshots `request`, refusing credentials and bodies that cannot be stored.
    package init(_ request: TransportRequest, sensitiveHeaders: Set<String>) throws(BrickError) {
        let refused = CredentialFields.names.union(sensitiveHeaders.map { $0.lowercased() })
        var headers: [[String]] = []
        for field in request.headerFields {
            let name = field.name.canonicalName
            if refused.contains(name) {
                throw BrickError(
                    .invalidRequest,
                    message: "the request carries \(field.name.rawName), which an offline queue never writes to disk; "
                        + "give the queue an authenticator, which signs each attempt when it is sent"
                )
            }
            headers.append([field.name.rawName, field.value])
        }
        var body: Data? = nil
        if let segments = request.body?.segments {
            var bytes = Data()
            for segment in segments {
                switch segment {
                case .data(let data):
                    bytes.append(data)
                case .file(let path):
                    guard let handle = FileHandle(forReadingAtPath: path) else {
                        throw BrickError(.invalidRequest, message: "cannot read the body file \(path)")
                    }
                    defer { try? handle.close() }
                    let data = (try? handle.read(upToCount: Self.maxBodyBytes + 1)).flatMap { $0 } ?? Data()
                    bytes.append(data)
                case .stream:
                    throw BrickError(
                        .invalidRequest,
                        message: "a streamed body cannot be stored for later: give the entry its bytes or a file"
                    )
                }
                if bytes.count > Self.maxBodyBytes {
                    throw BrickError(
                        .invalidRequest,
                        message: "the body is larger than an offline entry holds (\(Self.maxBodyBytes >> 20) MiB)"
                    )
                }
            }
            body = bytes
        }
        self.method = request.method.rawValue
        self.url = request.urlString
        self.headers = headers
        self.body = body
        self.timeoutSeconds = request.options.timeout.map(\.seconds)
        self.maxResponseSize = request.options.maxResponseSize
        self.followsRedirects = request.options.followsRedirects ? nil : false
        self.egressPolicy = request.options.egressPolicy
    }

    /// The request to send for one attempt: the stored one, with `Idempotency-Key` when the
    /// method is not idempotent, and the credential's header fields when there are any.
    package func transportRequest(idempotencyKey: String, credential: [String: String]) throws -> TransportRequest {
        guard let method = HTTPRequest.Method(method) else {
            throw BrickError(.invalidRequest, message: "the stored method \(method.debugDescription) is not valid")
        }
        var pairs = headers.compactMap { $0.count == 2 ? (name: $0[0], value: $0[1]) : nil }
        let names = Set(pairs.map { $0.name.lowercased() })
        if !["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"].contains(method.rawValue),
            !names.contains("idempotency-key")
        {
            pairs.append((name: "Idempotency-Key", value: idempotencyKey))
        }
        for (name, value) in credential.sorted(by: { $0.key < $1.key }) {
            pairs.removeAll { $0.name.lowercased() == name.lowercased() }
            pairs.append((name: name, value: value))
        }
        var options = TransportRequest.Options(
            // A damaged row may hold any number: past 10^12 s (beyond any wait) it means no limit's
            // worth of difference, and Duration would trap on 10^300.
            timeout: timeoutSeconds.flatMap { $0.isFinite && $0 > 0 ? Duration.seconds(min($0, 1e12)) : nil },
            maxResponseSize: maxResponseSize,
            followsRedirects: followsRedirects ?? true
        )
        options.egressPolicy = egressPolicy
        return try TransportRequest(method: method, url: url, headers: pairs, body: body.map { .data($0) }, options: options)
    }

    package func encoded() throws(BrickError) -> Data {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return try encoder.encode(self)
        } catch {
            throw BrickError(.invalidRequest, message: "cannot encode the request for storage", underlying: error)
        }
    }

    /// Reads a stored payload back; an entry of a later format is refused.
    package static func decoded(_ payload: Data) throws -> StoredRequest {
        let stored = try JSONDecoder().decode(StoredRequest.self, from: payload)
        guard stored.version == 1 else {
            throw BrickError(.invalidRequest, message: "stored by a later release (format \(stored.version))")
        }
        return stored
    }
}
