// expect-error: does not conform to the 'Sendable' protocol
// A cache that is not Sendable cannot be declared (it would be shared by the session's threads).
import BrickRequest

final class UnsafeCache {
    var entries: [String: String] = [:]
}

final class Misdeclared: Component, GETRequestType, CachedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/a" }
    var responseCache: UnsafeCache { UnsafeCache() }
}
