import BrickRequest
import Foundation
import HTTPTypes
import Testing

/// The cache's decisions, row by row, with no I/O (`CacheRules`, `CacheControl`, the freshness
/// facts, `CacheKey`), and the in-memory store's LRU.
@Suite("Response cache rules (no I/O)", .timeLimit(.minutes(3)))
struct CacheRulesTests {
    typealias Stored = CacheRules.Stored

    static func control(_ value: String) -> CacheControl {
        var fields = HTTPFields()
        fields[.cacheControl] = value
        return CacheControl(fields)
    }

    static let fresh = Stored(age: .seconds(10), lifetime: .seconds(60), hasValidators: true)
    static let staleWithValidators = Stored(age: .seconds(120), lifetime: .seconds(60), hasValidators: true)
    static let staleNoValidators = Stored(age: .seconds(120), lifetime: .seconds(60), hasValidators: false)
    static let freshNoCache = Stored(age: .seconds(1), lifetime: .seconds(60), control: control("no-cache"), hasValidators: true)
    static let staleSWR = Stored(age: .seconds(70), lifetime: .seconds(60), control: control("stale-while-revalidate=30"), hasValidators: true)
    static let staleBeyondSWR = Stored(age: .seconds(100), lifetime: .seconds(60), control: control("stale-while-revalidate=30"), hasValidators: true)
    static let staleSIE = Stored(age: .seconds(70), lifetime: .seconds(60), control: control("stale-if-error=600"), hasValidators: false)
    static let staleSIEMustRevalidate = Stored(age: .seconds(70), lifetime: .seconds(60), control: control("stale-if-error=600, must-revalidate"))
    static let staleSWRMustRevalidate = Stored(age: .seconds(70), lifetime: .seconds(60), control: control("stale-while-revalidate=30, must-revalidate"), hasValidators: true)

    struct LookupRow: Sendable, CustomStringConvertible {
        var policy: CachePolicy
        var request: String
        var stored: Stored?
        var expected: CacheRules.Lookup
        var line: Int
        var description: String { "line \(line): \(policy) request[\(request)]" }
    }

    static let lookupRows: [LookupRow] = [
        // .http: freshness, revalidation, directives.
        LookupRow(policy: .http, request: "", stored: nil, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .http, request: "", stored: fresh, expected: .useStored(stale: false), line: #line),
        LookupRow(policy: .http, request: "", stored: staleWithValidators, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "", stored: staleNoValidators, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .http, request: "", stored: freshNoCache, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "no-cache", stored: fresh, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "max-age=5", stored: fresh, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "max-age=30", stored: fresh, expected: .useStored(stale: false), line: #line),
        LookupRow(policy: .http, request: "min-fresh=55", stored: fresh, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "max-stale=100", stored: staleWithValidators, expected: .useStored(stale: true), line: #line),
        LookupRow(policy: .http, request: "max-stale=10", stored: staleWithValidators, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "max-stale", stored: staleWithValidators, expected: .useStored(stale: true), line: #line),
        LookupRow(policy: .http, request: "max-stale", stored: staleSIEMustRevalidate, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .http, request: "", stored: staleSWR, expected: .useStoredAndRevalidate, line: #line),
        LookupRow(policy: .http, request: "", stored: staleBeyondSWR, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "", stored: staleSWRMustRevalidate, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .http, request: "only-if-cached", stored: nil, expected: .miss, line: #line),
        LookupRow(policy: .http, request: "only-if-cached", stored: fresh, expected: .useStored(stale: false), line: #line),
        LookupRow(policy: .http, request: "only-if-cached", stored: staleWithValidators, expected: .miss, line: #line),
        // The explicit policies.
        LookupRow(policy: .networkOnly, request: "", stored: fresh, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .networkOnly, request: "", stored: nil, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .cacheOnly, request: "", stored: nil, expected: .miss, line: #line),
        LookupRow(policy: .cacheOnly, request: "", stored: fresh, expected: .useStored(stale: false), line: #line),
        LookupRow(policy: .cacheOnly, request: "", stored: staleNoValidators, expected: .useStored(stale: true), line: #line),
        LookupRow(policy: .cacheElseNetwork, request: "", stored: nil, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .cacheElseNetwork, request: "", stored: staleWithValidators, expected: .useStored(stale: true), line: #line),
        LookupRow(policy: .cacheElseNetwork, request: "no-cache", stored: freshNoCache, expected: .useStored(stale: false), line: #line),
        LookupRow(policy: .networkElseCache, request: "", stored: fresh, expected: .fetch(conditional: true), line: #line),
        LookupRow(policy: .networkElseCache, request: "", stored: staleNoValidators, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .networkElseCache, request: "", stored: nil, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .cacheThenNetwork, request: "", stored: nil, expected: .fetch(conditional: false), line: #line),
        LookupRow(policy: .cacheThenNetwork, request: "", stored: fresh, expected: .useStoredThenFetch(conditional: true), line: #line),
        LookupRow(policy: .cacheThenNetwork, request: "", stored: staleNoValidators, expected: .useStoredThenFetch(conditional: false), line: #line),
    ]

    @Test("before sending: policy × request directives × stored response", arguments: lookupRows)
    func lookup(row: LookupRow) {
        let decision = CacheRules.lookup(policy: row.policy, request: Self.control(row.request), stored: row.stored)
        #expect(decision == row.expected, "\(row)")
    }

    struct AfterRow: Sendable, CustomStringConvertible {
        var policy: CachePolicy
        var stored: Stored?
        var conditional: Bool
        var result: CacheRules.NetworkResult
        var expected: CacheRules.AfterNetwork
        var line: Int
        var description: String { "line \(line): \(policy) \(result)" }
    }

    static let afterRows: [AfterRow] = [
        AfterRow(policy: .http, stored: staleWithValidators, conditional: true, result: .notModified(selectsStored: true), expected: .deliverRevalidated, line: #line),
        AfterRow(policy: .http, stored: nil, conditional: false, result: .notModified(selectsStored: true), expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .http, stored: staleWithValidators, conditional: true, result: .response(status: 200), expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .http, stored: staleWithValidators, conditional: true, result: .unreachable, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .http, stored: staleSIE, conditional: false, result: .unreachable, expected: .deliverStoredAsFallback, line: #line),
        AfterRow(policy: .http, stored: staleSIE, conditional: false, result: .response(status: 503), expected: .deliverStoredAsFallback, line: #line),
        AfterRow(policy: .http, stored: staleSIE, conditional: false, result: .response(status: 501), expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .http, stored: staleSIE, conditional: false, result: .failed, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .http, stored: staleSIEMustRevalidate, conditional: false, result: .unreachable, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .networkElseCache, stored: staleNoValidators, conditional: false, result: .unreachable, expected: .deliverStoredAsFallback, line: #line),
        AfterRow(policy: .networkElseCache, stored: staleSIEMustRevalidate, conditional: false, result: .unreachable, expected: .deliverStoredAsFallback, line: #line),
        AfterRow(policy: .networkElseCache, stored: staleNoValidators, conditional: false, result: .response(status: 503), expected: .deliverNetwork(store: false), line: #line),
        AfterRow(policy: .networkElseCache, stored: staleSIE, conditional: false, result: .response(status: 502), expected: .deliverStoredAsFallback, line: #line),
        AfterRow(policy: .networkElseCache, stored: staleNoValidators, conditional: false, result: .failed, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .networkElseCache, stored: nil, conditional: false, result: .unreachable, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .networkElseCache, stored: fresh, conditional: true, result: .notModified(selectsStored: true), expected: .deliverRevalidated, line: #line),
        AfterRow(policy: .cacheThenNetwork, stored: staleNoValidators, conditional: false, result: .unreachable, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .cacheThenNetwork, stored: fresh, conditional: true, result: .notModified(selectsStored: true), expected: .deliverRevalidated, line: #line),
        AfterRow(policy: .networkOnly, stored: staleSIE, conditional: false, result: .unreachable, expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .networkOnly, stored: nil, conditional: false, result: .response(status: 500), expected: .deliverNetwork(store: false), line: #line),
        // A 304 whose validators do not select the stored response: not refreshed, sent again.
        AfterRow(policy: .http, stored: staleWithValidators, conditional: true, result: .notModified(selectsStored: false), expected: .refetchUnconditionally, line: #line),
        AfterRow(policy: .networkElseCache, stored: fresh, conditional: true, result: .notModified(selectsStored: false), expected: .refetchUnconditionally, line: #line),
        // One definition of "the server failed": a 501 is a definite answer, stored or not.
        AfterRow(policy: .networkElseCache, stored: nil, conditional: false, result: .response(status: 501), expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .networkElseCache, stored: staleNoValidators, conditional: false, result: .response(status: 501), expected: .deliverNetwork(store: true), line: #line),
        AfterRow(policy: .networkOnly, stored: nil, conditional: false, result: .response(status: 503), expected: .deliverNetwork(store: false), line: #line),
    ]

    struct SelectRow: Sendable, CustomStringConvertible {
        var storedTag: String?
        var storedModified: String?
        var notModified: [(String, String)]
        var expected: Bool
        var line: Int
        var description: String { "line \(line)" }
    }

    static let selectRows: [SelectRow] = [
        SelectRow(storedTag: "\"v1\"", notModified: [("ETag", "\"v1\"")], expected: true, line: #line),
        SelectRow(storedTag: "\"v1\"", notModified: [("ETag", "\"v2\"")], expected: false, line: #line),
        SelectRow(storedTag: nil, storedModified: "Tue, 01 Jan 2030 00:00:00 GMT", notModified: [("ETag", "\"v2\"")], expected: false, line: #line),
        SelectRow(storedTag: "W/\"v1\"", notModified: [("ETag", "W/\"v1\"")], expected: true, line: #line),
        SelectRow(storedTag: "\"v1\"", notModified: [("ETag", "W/\"v1\"")], expected: true, line: #line),
        SelectRow(storedTag: "W/\"v1\"", notModified: [("ETag", "W/\"v2\"")], expected: false, line: #line),
        SelectRow(storedModified: "Tue, 01 Jan 2030 00:00:00 GMT", notModified: [("Last-Modified", "Tue, 01 Jan 2030 00:00:00 GMT")], expected: true, line: #line),
        SelectRow(storedModified: "Tue, 01 Jan 2030 00:00:00 GMT", notModified: [("Last-Modified", "Wed, 02 Jan 2030 00:00:00 GMT")], expected: false, line: #line),
        SelectRow(storedTag: "\"v1\"", notModified: [], expected: true, line: #line),
    ]

    @Test("which stored response a 304 selects (RFC 9111 §4.3.4)", arguments: selectRows)
    func notModifiedSelects(row: SelectRow) {
        var fields = HTTPFields()
        for (name, value) in row.notModified { fields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        #expect(CacheRules.notModifiedSelects(entityTag: row.storedTag, lastModified: row.storedModified, notModified: fields) == row.expected, "\(row)")
    }

    @Test("after the server answered: policy × stored response × result", arguments: afterRows)
    func afterNetwork(row: AfterRow) {
        let decision = CacheRules.afterNetwork(
            policy: row.policy,
            stored: row.stored,
            conditional: row.conditional,
            result: row.result
        )
        #expect(decision == row.expected, "\(row)")
    }

    struct StoreRow: Sendable, CustomStringConvertible {
        var facts: CacheRules.Storability
        var expected: Bool
        var line: Int
        var description: String { "line \(line)" }
    }

    static let storeRows: [StoreRow] = [
        StoreRow(facts: .init(method: .get, status: 200), expected: true, line: #line),
        StoreRow(facts: .init(method: .head, status: 200), expected: true, line: #line),
        StoreRow(facts: .init(method: .post, status: 200, response: control("max-age=60")), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 201), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 201, response: control("max-age=60")), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 302), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 302, hasExpires: true), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 404), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 206, response: control("max-age=60")), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 304), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, response: control("no-store")), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, request: control("no-store")), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, response: control("private, max-age=60")), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, isAuthorized: true), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, response: control("max-age=60"), isAuthorized: true), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, response: control("public"), isAuthorized: true), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, response: control("s-maxage=60"), isAuthorized: true), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, response: control("must-revalidate"), isAuthorized: true), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, isAuthorized: true, storesAuthorized: true), expected: true, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, variesOnEverything: true), expected: false, line: #line),
        StoreRow(facts: .init(method: .get, status: 200, bodyInMemory: false), expected: false, line: #line),
    ]

    @Test("what may be stored (RFC 9111 §3)", arguments: storeRows)
    func storability(row: StoreRow) {
        #expect(row.facts.isStorable == row.expected, "\(row)")
    }

    static let base = Date(timeIntervalSince1970: 1_800_000_000)

    static func facts(_ fields: [(String, String)], status: Int = 200, delay: Double = 0) -> StoredResponseFacts {
        var headers = HTTPFields()
        for (name, value) in fields { headers.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return StoredResponseFacts(status: status, fields: headers, requestTime: base.addingTimeInterval(-delay), responseTime: base)
    }

    static func httpDate(_ offset: Double) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: base.addingTimeInterval(offset))
    }

    @Test("a wall clock stepped back: a response stored 'in the future' has an unknown age and is stale, within a 2 s skew it is not", arguments: [
        (-3600.0, nil), (-86_400.0, nil), (-1.5, 5.0), (0.0, 5.0), (10.0, 15.0),
    ] as [(Double, Double?)])
    func clockSteppedBack(offset: Double, expectedAge: Double?) {
        let arrived = Date(timeIntervalSince1970: 1_800_000_000)
        var fields = HTTPFields()
        fields[.cacheControl] = "max-age=60"
        fields[.age] = "5"
        let facts = StoredResponseFacts(status: 200, fields: fields, requestTime: arrived, responseTime: arrived)
        let age = facts.age(at: arrived.addingTimeInterval(offset))
        if let expectedAge {
            #expect(age == .seconds(expectedAge))
        } else {
            #expect(age == StoredResponseFacts.unknownAge)
            let stored = Stored(age: age, lifetime: facts.lifetime, hasValidators: true)
            #expect(CacheRules.lookup(policy: .http, request: CacheControl(HTTPFields()), stored: stored) == .fetch(conditional: true))
        }
    }

    @Test("freshness lifetime: max-age over Expires, Expires − Date, the Last-Modified heuristic, invalid values")
    func lifetime() {
        #expect(Self.facts([("Cache-Control", "max-age=60"), ("Expires", Self.httpDate(3600))]).lifetime == .seconds(60))
        #expect(Self.facts([("Date", Self.httpDate(0)), ("Expires", Self.httpDate(300))]).lifetime == .seconds(300))
        // Expires is measured from the server's Date, not from the local clock.
        #expect(Self.facts([("Date", Self.httpDate(-100)), ("Expires", Self.httpDate(200))]).lifetime == .seconds(300))
        #expect(Self.facts([("Expires", "0")]).lifetime == .zero)
        #expect(Self.facts([("Cache-Control", "max-age=soon")]).lifetime == .zero)
        #expect(Self.facts([("Cache-Control", "max-age=60, max-age=120")]).lifetime == .zero)
        let heuristic = Self.facts([("Date", Self.httpDate(0)), ("Last-Modified", Self.httpDate(-10_000))])
        #expect(heuristic.lifetime == .seconds(1000))
        #expect(heuristic.isHeuristic)
        #expect(Self.facts([("Last-Modified", Self.httpDate(-10_000_000))]).lifetime == .seconds(86_400))
        // No heuristic for a status that does not allow one.
        #expect(Self.facts([("Last-Modified", Self.httpDate(-10_000))], status: 302).lifetime == .zero)
        #expect(Self.facts([]).lifetime == .zero)
    }

    @Test("age: Age field, apparent age from Date, the exchange's delay, time since (RFC 9111 §4.2.3)")
    func age() {
        #expect(Self.facts([("Age", "30")]).age(at: Self.base) == .seconds(30))
        #expect(Self.facts([("Age", "30")], delay: 2).age(at: Self.base) == .seconds(32))
        #expect(Self.facts([("Date", Self.httpDate(-50))]).age(at: Self.base) == .seconds(50))
        #expect(Self.facts([("Date", Self.httpDate(-50)), ("Age", "80")]).age(at: Self.base) == .seconds(80))
        // A Date in the future does not make the age negative.
        #expect(Self.facts([("Date", Self.httpDate(500))]).age(at: Self.base) == .zero)
        #expect(Self.facts([("Age", "10")]).age(at: Self.base.addingTimeInterval(100)) == .seconds(110))
        #expect(Self.facts([("Age", "not a number")]).age(at: Self.base) == .zero)
        // Fresh, then stale: max-age 60, an hour later.
        let facts = Self.facts([("Cache-Control", "max-age=60")])
        #expect(Stored(facts, now: Self.base.addingTimeInterval(59)).isFresh)
        #expect(!Stored(facts, now: Self.base.addingTimeInterval(3600)).isFresh)
    }

    @Test("Cache-Control parsing: case, spaces, quoted arguments with commas, Pragma")
    func parsing() {
        let parsed = Self.control(#"Max-Age=60 , private="Set-Cookie, X", NO-CACHE,stale-if-error=5"#)
        #expect(parsed.maxAge == .seconds(60))
        #expect(parsed.isPrivate && parsed.noCache)
        #expect(parsed.staleIfError == .seconds(5))
        #expect(!parsed.hasInvalidFreshness)
        #expect(Self.control("max-age=99999999999999").maxAge == .seconds(1 << 31))
        var pragma = HTTPFields()
        pragma[HTTPField.Name("Pragma")!] = "no-cache"
        #expect(CacheControl(pragma).noCache)
        pragma[.cacheControl] = "max-age=5"
        #expect(!CacheControl(pragma).noCache, "Cache-Control wins over Pragma")
    }

    @Test("keys: canonical query order, case of scheme and host, default port, fragment")
    func keys() {
        let a = CacheKey(method: "get", url: "HTTPS://API.Example.com:443/Items?b=2&a=1&a=0#top")
        let b = CacheKey(method: "GET", url: "https://api.example.com/Items?a=1&a=0&b=2")
        #expect(a == b)
        #expect(a.url == "https://api.example.com/Items?a=1&a=0&b=2")
        // Same-named items keep their order: a=0&a=1 is another request.
        #expect(CacheKey(method: "GET", url: "http://h/x?a=0&a=1") != CacheKey(method: "GET", url: "http://h/x?a=1&a=0"))
        #expect(CacheKey(method: "GET", url: "http://h:8080/x").url == "http://h:8080/x")
        #expect(CacheKey(method: "GET", url: "http://h").url == "http://h/")
        #expect(CacheKey(method: "HEAD", url: "http://h/x") != CacheKey(method: "GET", url: "http://h/x"))
    }

    @Test("a 304 refreshes the stored fields, except Content-Length")
    func refresh() {
        var stored = HTTPFields()
        stored[.contentLength] = "10"
        stored[.cacheControl] = "max-age=1"
        stored[.eTag] = "\"a\""
        stored[.contentType] = "application/json"
        var notModified = HTTPFields()
        notModified[.cacheControl] = "max-age=600"
        notModified[.contentLength] = "0"
        notModified[.connection] = "keep-alive"
        notModified[.setCookie] = "session=for-someone-else"
        let refreshed = CacheRules.refreshed(stored, with: notModified)
        #expect(refreshed[.cacheControl] == "max-age=600")
        #expect(refreshed[.contentLength] == "10")
        #expect(refreshed[.contentType] == "application/json")
        #expect(refreshed[.connection] == nil)
        // A cookie set for one revalidation is never stored for the next reader.
        #expect(refreshed[.setCookie] == nil)
    }

    static func response(_ path: String, bytes: Int, variant: String = "") -> CachedResponse {
        CachedResponse(
            key: CacheKey(method: "GET", url: "http://h\(path)"),
            variant: variant,
            status: 200,
            headerFields: [:],
            body: Data(count: bytes),
            url: "http://h\(path)",
            requestTime: base,
            responseTime: base
        )
    }

    @Test("in memory: bounded in bytes, least recently used evicted first, variants kept apart")
    func inMemoryLRU() {
        let cache = InMemoryResponseCache(maxBytes: 10_000)
        cache.store(Self.response("/a", bytes: 2000))
        cache.store(Self.response("/b", bytes: 2000))
        cache.store(Self.response("/c", bytes: 2000))
        _ = cache.cachedResponses(for: CacheKey(method: "GET", url: "http://h/a"))  // a is now the newest
        cache.store(Self.response("/d", bytes: 2000))
        cache.store(Self.response("/e", bytes: 2000))
        #expect(cache.totalBytes <= 10_000)
        #expect(cache.cachedResponses(for: CacheKey(method: "GET", url: "http://h/b")).isEmpty, "b was least recently used")
        #expect(!cache.cachedResponses(for: CacheKey(method: "GET", url: "http://h/a")).isEmpty)
        // A response over a quarter of the bound is not stored.
        cache.store(Self.response("/big", bytes: 3000))
        #expect(cache.cachedResponses(for: CacheKey(method: "GET", url: "http://h/big")).isEmpty)
        // Variants of one key; the same variant replaces.
        cache.store(Self.response("/v", bytes: 10, variant: "accept-language: en\n"))
        cache.store(Self.response("/v", bytes: 10, variant: "accept-language: de\n"))
        cache.store(Self.response("/v", bytes: 20, variant: "accept-language: de\n"))
        let variants = cache.cachedResponses(for: CacheKey(method: "GET", url: "http://h/v"))
        #expect(variants.count == 2)
        #expect(variants.first?.body.count == 20)
        cache.removeCachedResponses(for: CacheKey(method: "GET", url: "http://h/v"))
        #expect(cache.cachedResponses(for: CacheKey(method: "GET", url: "http://h/v")).isEmpty)
        cache.removeAll()
        #expect(cache.count == 0 && cache.totalBytes == 0)
    }
}
