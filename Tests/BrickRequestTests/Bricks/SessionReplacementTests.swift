import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// A session that nothing answers: a test that reaches it without a replacement fails.
enum Unreachable {
    static let session = Session(
        configuration: .init(originOverride: "http://127.0.0.1:9"),
        reachability: AlwaysReachable()
    )
}

protocol UnreachableSessionRequestType: SessionRequestType {}
extension UnreachableSessionRequestType {
    var session: Session { Unreachable.session }
}

/// An endpoint whose session comes from a brick, as `APISessionRequestType` in the README.
final class BrickSessionUser: Component, GETRequestType, UnreachableSessionRequestType, NonAutoRetryType, StringResponseType {
    var urlString: String { "https://api.example.com/users" }
}

/// The same with the soft retries (3, 5 s apart).
final class RetryingBrickSessionUser: Component, GETRequestType, UnreachableSessionRequestType, SoftAutoRetryType,
    StringResponseType
{
    var urlString: String { "https://api.example.com/users" }
}

/// An endpoint with no response brick: `resume()` must still send it.
final class UnansweredPost: Component, POSTRequestType, NonAutoRetryType {
    let urlString: String
    let session: Session
    init(url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// The app's own cache, on disk in a real app: an endpoint that names it.
enum AppCache {
    static let cache = InMemoryResponseCache()
}

final class CachedUser: Component, GETRequestType, UnreachableSessionRequestType, NonAutoRetryType, CachedResponseType,
    StringResponseType
{
    var urlString: String { "https://api.example.com/users" }
    var responseCache: InMemoryResponseCache { AppCache.cache }
}

@Suite("Session replacement, resume() without a response brick, runningRequests and cancelAll", .timeLimit(.minutes(2)))
struct SessionReplacementTests {
    static func stub(answering body: String) -> StubTransport {
        let stub = StubTransport()
        stub.stub(.get, "/users", StubResponse(body: Data(body.utf8)))
        return stub
    }

    @Test("inside a replacement, an endpoint that names its own cache uses the replacement's; unless asked to keep it")
    func replacementCache() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users", StubResponse(headers: [.cacheControl: "max-age=600"], body: Data("Ada".utf8)))
        let replacement = Session.testing(stub)
        let user = try await Unreachable.session.withReplacement(replacement) { try await CachedUser().value }
        #expect(user == "Ada")
        #expect(AppCache.cache.count == 0)  // the stubbed answer never reached the app's cache
        let key = CacheKey(method: "GET", url: "https://api.example.com/users")
        #expect(try replacement.configuration.responseCache.cachedResponses(for: key).count == 1)
        // Asked to keep endpoint caches: the endpoint's own is used (to test it).
        _ = try await Unreachable.session.withReplacement(.testing(stub), keepingEndpointCaches: true) {
            try await CachedUser().value
        }
        #expect(AppCache.cache.count == 1)
        AppCache.cache.removeAll()
    }

    @Test("async: inside withReplacement the brick's session runs on the stub; outside, on its own")
    func asyncForm() async throws {
        let stub = Self.stub(answering: "Ada")
        try await Unreachable.session.withReplacement(.testing(stub)) {
            let direct = try await BrickSessionUser().value
            #expect(direct == "Ada")
            // Child tasks see it too.
            async let child = BrickSessionUser().value
            let fromChild = try await child
            #expect(fromChild == "Ada")
            let unstructured = Task { try await BrickSessionUser().value }
            let fromTask = try await unstructured.childValue
            #expect(fromTask == "Ada")
        }
        #expect(stub.requests.count == 3)
        let outside = await BrickSessionUser().response()
        #expect(outside.error?.code == .cannotConnect)
        #expect(stub.requests.count == 3)
    }

    @Test("callback form: resume() inside the scope runs on the replacement, the handler gets its answer")
    func callbackForm() async throws {
        let stub = Self.stub(answering: "Grace")
        let answer = try await Unreachable.session.withReplacement(.testing(stub)) {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<String, any Error>) in
                BrickSessionUser().response { response in
                    continuation.resume(with: response.result.mapError { $0 as any Error })
                }.resume()
            }
        }
        #expect(answer == "Grace")
        #expect(stub.requests.first?.urlString == "https://api.example.com/users")
    }

    @Test("parallel tasks with their own replacements never see each other's")
    func parallel() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for name in ["one", "two", "three", "four"] {
                group.addTask {
                    let stub = Self.stub(answering: name)
                    try await Unreachable.session.withReplacement(.testing(stub)) {
                        for _ in 0..<25 {
                            let answer = try await BrickSessionUser().value
                            #expect(answer == name)
                            await Task.yield()
                        }
                    }
                    #expect(stub.requests.count == 25)
                }
            }
            try await group.waitForAll()
        }
    }

    @Test("the Testing article's retry example: a 503 then 200, the wait on the replacement's clock")
    func retryOnManualClock() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users", .status(.serviceUnavailable), StubResponse(body: Data("Ada".utf8)))
        let clock = ManualClock()
        try await Unreachable.session.withReplacement(.testing(stub, clock: clock)) {
            async let user = RetryingBrickSessionUser().value
            while clock.waiterCount == 0 { await Task.yield() }
            clock.advance(by: .seconds(5))
            let name = try await user
            #expect(name == "Ada")
        }
        #expect(stub.requests.count == 2)
    }

    @Test("other sessions are untouched; scopes nest, the innermost wins")
    func nesting() async throws {
        let outer = Self.stub(answering: "outer")
        let inner = Self.stub(answering: "inner")
        let other = Session.testing(Self.stub(answering: "other"))
        try await Unreachable.session.withReplacement(.testing(outer)) {
            try await Session.shared.withReplacement(other) {
                let first = try await BrickSessionUser().value
                #expect(first == "outer")
                try await Unreachable.session.withReplacement(.testing(inner)) {
                    let nested = try await BrickSessionUser().value
                    #expect(nested == "inner")
                }
                let last = try await BrickSessionUser().value
                #expect(last == "outer")
            }
        }
    }

    @Test("resume() on an endpoint with no response brick sends it")
    func resumeWithoutResponseBrick() async throws {
        try await withServer { server in
            let session = Session()
            UnansweredPost(url: server.baseURL + "/post", session: session).resume()
            await eventually { !server.requests(path: "/post").isEmpty }
            #expect(server.requests(path: "/post").count == 1)
        }
    }

    @Test("runningRequests counts requests in flight; cancelAll cancels each once")
    func cancelAll() async throws {
        try await withServer { server in
            let session = Session()
            let outcomes = Mutex<[BrickError.Code?]>([])
            for _ in 0..<3 {
                SessionGet(url: server.baseURL + "/delay/20", session: session).response { response in
                    outcomes.withLock { $0.append(response.error?.code) }
                }.resume()
            }
            await eventually { session.runningRequests >= 3 }
            #expect(session.runningRequests == 3)
            session.cancelAll()
            await eventually { outcomes.withLock({ $0.count }) >= 3 }
            #expect(outcomes.withLock { $0 } == [.cancelled, .cancelled, .cancelled])
            #expect(session.runningRequests == 0)
            let after = await SessionGet(url: server.baseURL + "/get", session: session).response()
            #expect(after.status?.code == 200, "requests started after cancelAll run normally")
        }
    }
}
