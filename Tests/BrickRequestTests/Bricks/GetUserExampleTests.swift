import BrickRequest
import BrickTestSupport
import BrickTestServer
import Foundation
import Synchronization
import Testing

// The README's GetUser example, unchanged. `Session.api` points at a loopback server through
// `originOverride`, so "https://api.example.com/users" is answered on 127.0.0.1.

protocol APISessionRequestType: SessionRequestType {}
extension APISessionRequestType { var session: Session { Session.api } }  // user-defined brick

final class GetUser: Component, GETRequestType, APISessionRequestType, SoftAutoRetryType, JSONResponseType {
    let userID: String
    var urlString: String { "https://api.example.com/users" }
    init(userID: String) {
        self.userID = userID
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: userID, name: "userID"))
        super.init(parameterBuilder: parameters)
    }
}

enum ExampleAPI {
    /// One loopback server for the example's endpoints, started on first use.
    static let server: BrickTestServer = {
        let server = try! BrickTestServer.start()
        server.route("/users") { request in
            let id = request.uri.components(separatedBy: "userID=").last ?? ""
            return .ok(#"{"id":"\#(id)","name":"User \#(id)"}"#, contentType: "application/json")
        }
        return server
    }()
}

extension Session {
    static let api = Session(configuration: .init(originOverride: ExampleAPI.server.baseURL))
}

@Suite("The GetUser example", .timeLimit(.minutes(2)))
struct GetUserExampleTests {
    @Test("response(_:) + resume() delivers the JSON once")
    func callback() async throws {
        let request = GetUser(userID: "100")
        let delivered = Delivered<Response<JSON, BrickError>>()
        request.response { response in
            delivered.add(response)
        }
        request.resume()
        let response = try await delivered.first()
        #expect(response.value?["name"].string == "User 100")
        #expect(response.status == .ok)
        #expect(response.request?.urlString == ExampleAPI.server.baseURL + "/users?userID=100")
        #expect(request.state == .completed)
        // The barrier: a later request's handler, on the same serial callback queue, runs after
        // any second delivery of the first.
        let later = Delivered<Response<JSON, BrickError>>()
        GetUser(userID: "101").response { later.add($0) }.resume()
        _ = try await later.first()
        #expect(delivered.count == 1)
    }

    @Test("value and response() async")
    func async() async throws {
        let user = try await GetUser(userID: "100").value
        #expect(user["name"].string == "User 100")
        let full = await GetUser(userID: "7").response()
        #expect(full.value?["id"].string == "7")
        #expect(full.retryCount == 0)
        #expect(full.source == .network)
        #expect(full.metrics?.httpVersion == .http1_1)
    }

    @Test("value works from the main actor")
    @MainActor
    func mainActor() async throws {
        let user = try await GetUser(userID: "42").value
        #expect(user["id"].string == "42")
    }

    @Test("the soft retry brick configures three retries")
    func retryBrick() {
        #expect(GetUser(userID: "1").autoRetryConfiguration.maxRetryCount == 3)
    }
}

/// Collects values delivered to callbacks, and waits for them without fixed sleeps.
final class Delivered<Value: Sendable>: Sendable {
    private let values = Lock<[Value]>([])

    func add(_ value: Value) { values.withLock { $0.append(value) } }
    var count: Int { values.withLock { $0.count } }
    var all: [Value] { values.withLock { $0 } }

    func first(timeout: Duration = .seconds(30)) async throws -> Value {
        guard let value = await poll(within: timeout, { values.withLock { $0.first } }) else { throw CancellationError() }
        return value
    }
}
