import BrickRequest
import Foundation
import HTTPTypes
import Synchronization

/// What a queue keeps of a response while delivering an entry: the status and header fields
/// always, the body only up to a limit. A delivery needs the status alone (any 2xx); a body larger
/// than the limit stops the transfer instead of failing the attempt, so an accepted request whose
/// answer is large is never sent again.
final class ResponseCapture: Sendable {
    /// The body kept when the request names no limit: 16 MiB.
    static let defaultLimit: Int64 = 16 << 20

    private struct State {
        var head: (status: HTTPResponse.Status, fields: HTTPFields)?
        var body = Data()
        var overflowed = false
    }

    /// The state, shared with the stream's closures.
    private final class Shared: Sendable {
        let state = Lock(State())
    }

    private let shared = Shared()
    /// The destination to give the request.
    let stream: ResponseBodyStream

    init(limit: Int64) {
        let shared = self.shared
        let limit = max(0, limit)
        stream = ResponseBodyStream(
            onResponse: { status, fields in
                shared.state.withLock { $0 = State(head: (status, fields)) }
                return true
            },
            { bytes in
                shared.state.withLock { state in
                    guard Int64(state.body.count) + Int64(bytes.count) <= limit else {
                        state.overflowed = true
                        state.body = Data()
                        return false
                    }
                    state.body.append(contentsOf: bytes)
                    return true
                }
            }
        )
    }

    /// The transport's response with the kept body (a transport that ignores the stream, such as a
    /// test double, keeps its own body).
    func response(from response: TransportResponse) -> TransportResponse {
        guard response.body == nil else { return response }
        var completed = response
        completed.body = shared.state.withLock { $0.body }
        return completed
    }

    /// The response whose body outgrew the limit, without its body, when that is why the transfer
    /// ended with `error`.
    func responseWithoutBody(after error: TransportError) -> TransportResponse? {
        guard error.kind == .cancelled else { return nil }
        return shared.state.withLock { state in
            guard state.overflowed, let head = state.head else { return nil }
            return TransportResponse(status: head.status, headerFields: head.fields, body: nil)
        }
    }
}
