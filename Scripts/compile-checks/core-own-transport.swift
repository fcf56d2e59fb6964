// expect: compiles
// The core alone (no curl, no netlink): a transport of your own, a session on it, an endpoint
// that names its session, awaited.
import BrickRequestCore
import Dispatch
import FoundationEssentials

struct LoopbackEcho: Transport {
    func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        let url = request.urlString
        DispatchQueue.global().async {
            completion(.success(TransportResponse(status: .ok, body: Data(url.utf8), url: url)))
        }
        return TransportTask(onCancel: {})
    }
}

extension Session {
    static let echo = Session(transport: LoopbackEcho(), reachability: AlwaysReachable())
}

final class Ping: Component, GETRequestType, StringResponseType {
    var session: Session { .echo }
    var urlString: String { "http://127.0.0.1/ping" }
}

func ping() async throws -> String {
    try await Ping().value
}
