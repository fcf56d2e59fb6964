import BrickRequest
import BrickTestServer
import Foundation
import Synchronization
import Testing

/// A token store: starts with a stale token; refresh() swaps in a fresh one after `delay`.
final class TokenProvider: CredentialProvider {
    private let token = Lock("stale")
    private let fails: Bool
    let refreshes = Lock(0)
    init(fails: Bool = false) { self.fails = fails }

    func authorizationHeaders() async throws -> [String: String] {
        ["Authorization": "Bearer " + token.withLock { $0 }]
    }

    func refresh() async throws {
        refreshes.withLock { $0 += 1 }
        await Task.yield()  // let other requests reach their 401 and join this refresh
        if fails { throw CancellationError() }
        token.withLock { $0 = "fresh" }
    }
}

final class SecureGet: Component, GETRequestType, AuthenticatedRequestType, ValidatedResponseType, StringResponseType {
    let urlString: String
    let authenticator: Authenticator
    init(_ url: String, authenticator: Authenticator) {
        self.urlString = url
        self.authenticator = authenticator
        super.init()
    }
}

@Suite("AuthenticatedRequestType against the loopback server", .timeLimit(.minutes(2)))
struct AuthenticationTests {
    func secureServer() async throws -> BrickTestServer {
        let server = try await BrickTestServer.start()
        server.route("/secure") { request in
            request.header("Authorization") == "Bearer fresh" ? .ok("secret data") : .status(401)
        }
        return server
    }

    @Test("50 concurrent requests hit 401: one refresh, then every request replays and succeeds")
    func sharedRefresh() async throws {
        let server = try await secureServer()
        let provider = TokenProvider()
        let authenticator = Authenticator(provider: provider)
        let url = server.baseURL + "/secure"
        let results = await withTaskGroup(of: Result<String, BrickError>.self) { group in
            for _ in 0..<50 {
                group.addTask { await SecureGet(url, authenticator: authenticator).response().result }
            }
            var all: [Result<String, BrickError>] = []
            for await result in group { all.append(result) }
            return all
        }
        #expect(results.count == 50)
        #expect(results.allSatisfy { (try? $0.get()) == "secret data" })
        #expect(authenticator.refreshCount == 1)
        #expect(provider.refreshes.withLock { $0 } == 1)
        let seen = server.requests(path: "/secure")
        #expect(seen.filter { $0.header("Authorization") == "Bearer fresh" }.count == 50)
        #expect(seen.count <= 100)
        await server.shutdown()
    }

    @Test("a failed refresh fails the waiting requests with authenticationFailed, and nothing loops")
    func failedRefresh() async throws {
        let server = try await secureServer()
        let authenticator = Authenticator(provider: TokenProvider(fails: true))
        let url = server.baseURL + "/secure"
        let errors = await withTaskGroup(of: BrickError?.self) { group in
            for _ in 0..<10 {
                group.addTask { await SecureGet(url, authenticator: authenticator).response().error }
            }
            var all: [BrickError?] = []
            for await error in group { all.append(error) }
            return all
        }
        #expect(errors.allSatisfy { $0?.code == .authenticationFailed })
        #expect(server.requests(path: "/secure").count == 10)
        await server.shutdown()
    }

    @Test("still 401 after a refresh: delivered as 401, one refresh, no loop")
    func noRefreshLoop() async throws {
        let server = try await BrickTestServer.start()
        server.route("/never") { _ in .status(401) }
        let authenticator = Authenticator(provider: TokenProvider())
        let response = await SecureGet(server.baseURL + "/never", authenticator: authenticator).response()
        #expect(response.status == .unauthorized)
        #expect(response.error?.code == .unacceptableStatusCode)
        #expect(authenticator.refreshCount == 1)
        #expect(server.requests(path: "/never").count == 2)
        await server.shutdown()
    }

    @Test("the credential is applied at send time through response(_:) too")
    func callbackPath() async throws {
        let server = try await secureServer()
        let authenticator = Authenticator(provider: TokenProvider())
        let delivered = Delivered<Response<String, BrickError>>()
        SecureGet(server.baseURL + "/secure", authenticator: authenticator).response { delivered.add($0) }.resume()
        let response = try await delivered.first()
        #expect(response.value == "secret data")
        await server.shutdown()
    }
}
