import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Synchronization
import Testing

/// A cached GET of a `/cache/…` resource; the policy, headers and retries are the test's.
final class CachedGet: Component, GETRequestType, CachedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    let cachePolicy: CachePolicy
    let headers: [String: String]
    let autoRetryConfiguration: AutoRetryConfiguration
    let cachesAuthorizedResponses: Bool

    init(
        _ url: String,
        session: Session,
        policy: CachePolicy = .http,
        headers: [String: String] = [:],
        retry: AutoRetryConfiguration = .none,
        cachesAuthorized: Bool = false
    ) {
        self.urlString = url
        self.session = session
        self.cachePolicy = policy
        self.headers = headers
        self.autoRetryConfiguration = retry
        self.cachesAuthorizedResponses = cachesAuthorized
        super.init()
    }
}

/// A POST to a cached endpoint's URL.
final class CachedPost: Component, POSTRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// The `/cache/…` route's JSON body.
struct Served: Decodable, Equatable {
    var path: String
    var version: Int
    var served: Int
    var vary: [String: String]
}

extension Response where Success == Data {
    var served: Served? { value.flatMap { try? JSONDecoder().decode(Served.self, from: $0) } }
}

@Suite("Response cache against BrickTestServer", .timeLimit(.minutes(3)))
struct ResponseCacheTests {
    @Test("a fresh stored response is delivered with no request to the server")
    func freshHit() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/fresh?max_age=600"
            let first = await CachedGet(url, session: session).response()
            #expect(first.source == .network && first.age == nil && !first.isStale)
            let second = await CachedGet(url, session: session).response()
            #expect(second.source == .cache)
            #expect(!second.isStale)
            #expect(second.age != nil)
            #expect(second.data == first.data)
            #expect(second.headers[.age] != nil)
            #expect(server.requests(path: "/cache/fresh").count == 1)
        }
    }

    @Test("a stale response is revalidated: 304 with no body, the stored body delivered, headers refreshed")
    func revalidation() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/stale?max_age=0"
            let first = await CachedGet(url, session: session).response()
            #expect(first.served?.served == 1)
            let second = await CachedGet(url, session: session).response()
            #expect(second.source == .revalidated)
            #expect(second.status?.code == 200)
            #expect(second.data == first.data)
            #expect(server.notModifiedCount == 1)
            let requests = server.requests(path: "/cache/stale")
            #expect(requests.count == 2)
            #expect(requests.last?.header("If-None-Match") == "\"v1\"")
            #expect(requests.last?.header("If-Modified-Since") != nil)
        }
    }

    @Test("a changed resource replaces the stored response")
    func changedResource() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/changing?max_age=0"
            #expect(await CachedGet(url, session: session).response().served?.version == 1)
            server.changeResource("/cache/changing")
            let changed = await CachedGet(url, session: session).response()
            #expect(changed.source == .network)
            #expect(changed.served?.version == 2)
            let again = await CachedGet(url, session: session).response()
            #expect(again.source == .revalidated)
            #expect(again.served?.version == 2)
            #expect(server.requests(path: "/cache/changing").last?.header("If-None-Match") == "\"v2\"")
            let offline = await CachedGet(url, session: session, policy: .cacheOnly).response()
            #expect(offline.served?.version == 2)
        }
    }

    @Test("networkElseCache: with the server stopped, the stored response, flagged stale, at once despite retries")
    func offlineFallback() async throws {
        let server = try await BrickTestServer.start()
        let session = Session()
        let url = server.baseURL + "/cache/offline?lm=0"
        let online = await CachedGet(url, session: session, policy: .networkElseCache).response()
        #expect(online.source == .network)
        await server.shutdown()
        // Five retries, five seconds apart, by default: the stored response must not wait for them.
        let offline = await CachedGet(url, session: session, policy: .networkElseCache, retry: .default).response()
        #expect(offline.source == .cache)
        #expect(offline.isStale)
        #expect(offline.data == online.data)
        #expect(offline.retryCount == 0)
        // The same request under .http has no stale-if-error: the failure.
        let strict = await CachedGet(url, session: session).response()
        #expect(strict.error?.code == .cannotConnect)
        // Nothing stored for another URL: the failure, not an empty success.
        let missing = await CachedGet(server.baseURL + "/cache/never", session: session, policy: .networkElseCache).response()
        #expect(missing.error?.code == .cannotConnect)
    }

    @Test("cacheOnly: a miss is an error with no network I/O; a hit needs no server")
    func cacheOnly() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/only?lm=0"
            let miss = await CachedGet(url, session: session, policy: .cacheOnly).response()
            #expect(miss.error?.code == .notCached)
            #expect(miss.value == nil)
            #expect(server.requestCount == 0)
            _ = await CachedGet(url, session: session, policy: .networkOnly).response()
            let hit = await CachedGet(url, session: session, policy: .cacheOnly).response()
            #expect(hit.source == .cache)
            #expect(hit.isStale, "no freshness information: stale at once")
            #expect(server.requestCount == 1)
        }
    }

    @Test("cacheThenNetwork: a response(_:) handler is called twice, stored first; responses() yields both")
    func cacheThenNetwork() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/twice?max_age=0&etag=0&lm=0"
            let first = await CachedGet(url, session: session, policy: .cacheThenNetwork).response()
            #expect(first.source == .network && first.served?.served == 1)
            let deliveries = Lock<[Response<Data, BrickError>]>([])
            let done = DispatchSemaphore(value: 0)
            CachedGet(url, session: session, policy: .cacheThenNetwork).response { response in
                let count = deliveries.withLock { $0.append(response); return $0.count }
                if count == 2 { done.signal() }
            }.resume()
            #expect(await signalled(done))
            // The barrier: a later request's handler, on the same serial callback queue, runs after
            // any third delivery of the first.
            let later = DispatchSemaphore(value: 0)
            CachedGet(server.baseURL + "/get", session: session, policy: .networkOnly).response { _ in later.signal() }.resume()
            #expect(await signalled(later))
            let seen = deliveries.withLock { $0 }
            #expect(seen.count == 2)
            #expect(seen.map(\.source) == [.cache, .network])
            #expect(seen.map { $0.served?.served } == [1, 2])
            var sources: [ResponseSource] = []
            var served: [Int?] = []
            for await response in CachedGet(url, session: session, policy: .cacheThenNetwork).responses() {
                sources.append(response.source)
                served.append(response.served?.served)
            }
            #expect(sources == [.cache, .network])
            #expect(served == [2, 3], "the network response of the previous request was stored")
        }
    }

    @Test("no-store and Authorization are not stored; an endpoint may opt in for Authorization")
    func notStored() async throws {
        try await withServer { server in
            let session = Session()
            let noStore = server.baseURL + "/cache/nostore?cc=no-store,max-age=600"
            _ = await CachedGet(noStore, session: session).response()
            #expect(await CachedGet(noStore, session: session).response().source == .network)
            #expect(await CachedGet(noStore, session: session, policy: .cacheOnly).response().error?.code == .notCached)
            let secret = server.baseURL + "/cache/secret?max_age=600"
            let auth = ["Authorization": "Bearer t0ken"]
            _ = await CachedGet(secret, session: session, headers: auth).response()
            #expect(await CachedGet(secret, session: session, headers: auth).response().source == .network)
            #expect(server.requests(path: "/cache/secret").count == 2)
            let optIn = server.baseURL + "/cache/secret-ok?max_age=600"
            _ = await CachedGet(optIn, session: session, headers: auth, cachesAuthorized: true).response()
            #expect(await CachedGet(optIn, session: session, headers: auth, cachesAuthorized: true).response().source == .cache)
            let isPublic = server.baseURL + "/cache/public?cc=public,max-age=600"
            _ = await CachedGet(isPublic, session: session, headers: auth).response()
            #expect(await CachedGet(isPublic, session: session, headers: auth).response().source == .cache)
        }
    }

    @Test("Vary keeps two representations apart")
    func vary() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/lang?max_age=600&vary=Accept-Language"
            let english = ["Accept-Language": "en"]
            let german = ["Accept-Language": "de"]
            _ = await CachedGet(url, session: session, headers: english).response()
            _ = await CachedGet(url, session: session, headers: german).response()
            let en = await CachedGet(url, session: session, headers: english).response()
            let de = await CachedGet(url, session: session, headers: german).response()
            #expect(en.source == .cache && de.source == .cache)
            #expect(en.served?.vary["accept-language"] == "en")
            #expect(de.served?.vary["accept-language"] == "de")
            #expect(server.requests(path: "/cache/lang").count == 2)
            let none = await CachedGet(url, session: session).response()
            #expect(none.source == .network, "no Accept-Language is a third representation")
        }
    }

    @Test("stale-if-error: a 503 or a stopped server gets the stale response under .http")
    func staleIfError() async throws {
        let server = try await BrickTestServer.start()
        let session = Session()
        let url = server.baseURL + "/cache/sie?cc=max-age=0,stale-if-error=600&etag=0&lm=0"
        let first = await CachedGet(url, session: session).response()
        server.script("/cache/sie", [.status(503)])
        let failing = await CachedGet(url, session: session).response()
        #expect(failing.source == .cache && failing.isStale && failing.data == first.data)
        await server.shutdown()
        let offline = await CachedGet(url, session: session).response()
        #expect(offline.source == .cache && offline.isStale && offline.data == first.data)
    }

    @Test("stale-while-revalidate: the stale response at once, revalidated in the background")
    func staleWhileRevalidate() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/swr?cc=max-age=0,stale-while-revalidate=600"
            let first = await CachedGet(url, session: session).response()
            let stale = await CachedGet(url, session: session).response()
            #expect(stale.source == .cache && stale.isStale)
            #expect(stale.data == first.data)
            await eventually { server.notModifiedCount > 0 }
            #expect(server.notModifiedCount == 1)
            #expect(server.requests(path: "/cache/swr").last?.header("If-None-Match") == "\"v1\"")
        }
    }

    @Test("HYLNetworkCaching: networkOnly stores; cacheElseNetwork goes to the server only on a miss; removeAll empties")
    func hylPolicies() async throws {
        try await withServer { server in
            let cache = InMemoryResponseCache()
            let session = Session(configuration: .init(responseCache: cache))
            let url = server.baseURL + "/cache/hyl?max_age=0&etag=0&lm=0"
            let network = await CachedGet(url, session: session, policy: .networkOnly).response()
            #expect(network.source == .network && network.served?.served == 1)
            let again = await CachedGet(url, session: session, policy: .networkOnly).response()
            #expect(again.source == .network && again.served?.served == 2, "networkOnly never reads")
            let cached = await CachedGet(url, session: session, policy: .cacheElseNetwork).response()
            #expect(cached.source == .cache && cached.served?.served == 2)
            #expect(server.requests(path: "/cache/hyl").count == 2)
            let other = await CachedGet(server.baseURL + "/cache/hyl-miss", session: session, policy: .cacheElseNetwork).response()
            #expect(other.source == .network)
            cache.removeAll()
            #expect(cache.count == 0)
            #expect(await CachedGet(url, session: session, policy: .cacheOnly).response().error?.code == .notCached)
        }
    }

    @Test("a successful POST to the URL removes what is stored for it; removeCachedResponses() removes one")
    func invalidation() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/item?max_age=600"
            _ = await CachedGet(url, session: session).response()
            #expect(await CachedGet(url, session: session).response().source == .cache)
            let post = await CachedPost(url, session: session).response()
            #expect(post.status?.code == 200)
            #expect(await CachedGet(url, session: session).response().source == .network)
            #expect(await CachedGet(url, session: session).response().source == .cache)
            try CachedGet(url, session: session).removeCachedResponses()
            #expect(await CachedGet(url, session: session).response().source == .network)
        }
    }

    @Test("keys: the same query in another order is the same stored response")
    func canonicalQuery() async throws {
        try await withServer { server in
            let session = Session()
            _ = await CachedGet(server.baseURL + "/cache/q?max_age=600&b=2&a=1", session: session).response()
            let reordered = await CachedGet(server.baseURL + "/cache/q?a=1&max_age=600&b=2", session: session).response()
            #expect(reordered.source == .cache)
        }
    }

    @Test("Age from the server counts: a response older than its max-age is stale on arrival")
    func ageField() async throws {
        try await withServer { server in
            let session = Session()
            let url = server.baseURL + "/cache/old?max_age=60&age=100&etag=0&lm=0"
            _ = await CachedGet(url, session: session).response()
            let read = await CachedGet(url, session: session, policy: .cacheOnly).response()
            #expect(read.isStale)
            #expect((read.age ?? .zero) >= .seconds(100))
            #expect(await CachedGet(url, session: session).response().source == .network)
        }
    }
}
