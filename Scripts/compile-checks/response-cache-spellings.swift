// expect: compiles
// Every spelling of a declared response cache compiles, and each is used as written
// (DeclaredCacheTests proves the last part at run time).
import BrickOffline
import BrickRequest

let cache = try SQLiteResponseCache(name: "checks")

final class Concrete: Component, GETRequestType, CachedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/a" }
    var responseCache: SQLiteResponseCache { cache }
}

final class Existential: Component, GETRequestType, CachedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/b" }
    var responseCache: any ResponseCache { cache }
}

final class OptionalConcrete: Component, GETRequestType, CachedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/c" }
    var responseCache: SQLiteResponseCache? { cache }
}

final class OptionalExistential: Component, GETRequestType, CachedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/d" }
    var responseCache: (any ResponseCache)? { nil }
}

final class SessionCacheEndpoint: Component, GETRequestType, CachedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/e" }
}
