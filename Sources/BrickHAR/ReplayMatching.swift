import BrickRequestCore
import FoundationEssentials
public import HTTPTypes

/// Which parts of a request must equal a recorded one's for the recording to answer it.
///
/// Always the method and the URL — scheme and host without regard to case, the path exactly, the
/// query as a set of pairs (`?b=2&a=1` matches `?a=1&b=2`); a recorded value `REDACTED` (see
/// ``HARRedaction``) matches any value. Optionally header fields and the body.
public struct ReplayMatching: Sendable, Hashable {
    /// Header fields whose values must match too.
    public var headers: [HTTPField.Name]
    /// Whether the body must match too, byte for byte.
    public var body: Bool
    /// Whether a recorded loopback origin (`127.x.x.x`, `[::1]`, `localhost`) answers the same
    /// scheme and host on any port: for a recording made against a local server that listens on
    /// a new port each run (`BrickTestServer`, a container's published port). Other hosts keep
    /// their port. What the recorded bodies say (an absolute URL with the old port) is replayed
    /// as recorded.
    public var anyLoopbackPort: Bool

    /// Method and URL only: the default.
    public static let methodAndURL = ReplayMatching()

    /// Method, URL and these.
    ///
    /// - Parameters:
    ///   - headers: Header fields whose values must match.
    ///   - body: Whether the bodies must be equal.
    ///   - anyLoopbackPort: Whether a loopback origin matches on any port (``anyLoopbackPort``).
    public init(headers: [HTTPField.Name] = [], body: Bool = false, anyLoopbackPort: Bool = false) {
        self.headers = headers
        self.body = body
        self.anyLoopbackPort = anyLoopbackPort
    }
}

/// A request as a replay compares it: its method, URL in parts, header fields and body.
package struct ReplayProbe: Sendable, Hashable {
    var method: String
    /// `scheme://host:port`, lowercased, without the scheme's default port.
    var origin: String
    var path: String
    /// Name/value pairs, sorted.
    var query: [Pair]
    var headers: HTTPFields
    var body: Data?

    struct Pair: Sendable, Hashable, Comparable {
        var name: Substring
        var value: Substring
        static func < (a: Pair, b: Pair) -> Bool { (a.name, a.value) < (b.name, b.value) }
    }

    package init(method: String, url: String, headers: HTTPFields, body: Data?) {
        self.method = method
        self.headers = headers
        self.body = body
        var rest = Substring(url)
        if let fragment = rest.firstIndex(of: "#") { rest = rest[..<fragment] }
        var query: Substring = ""
        if let question = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: question)...]
            rest = rest[..<question]
        }
        if let schemeEnd = rest.firstRange(of: "://") {
            let pathStart = rest[schemeEnd.upperBound...].firstIndex(of: "/") ?? rest.endIndex
            origin = Self.normalized(origin: rest[..<pathStart].lowercased())
            path = pathStart == rest.endIndex ? "/" : String(rest[pathStart...])
        } else {
            origin = ""
            path = String(rest)
        }
        self.query = query.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return Pair(name: parts[0], value: parts.count > 1 ? parts[1] : "")
        }.sorted()
    }

    /// `origin` without its scheme's default port: `https://h:443` is `https://h`, `http://h:80`
    /// is `http://h`.
    static func normalized(origin: String) -> String {
        for (scheme, port) in [("https://", ":443"), ("http://", ":80")] where origin.hasPrefix(scheme) && origin.hasSuffix(port) {
            return String(origin.dropLast(port.count))
        }
        return origin
    }

    /// Whether two origins name the same scheme and loopback host, whatever their ports.
    static func sameLoopbackHost(_ one: String, _ other: String) -> Bool {
        func schemeAndHost(_ origin: String) -> (scheme: Substring, host: Substring)? {
            guard let schemeEnd = origin.firstRange(of: "://") else { return nil }
            let authority = origin[schemeEnd.upperBound...]
            let host: Substring
            if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
                host = authority[...close]
            } else {
                host = authority.prefix { $0 != ":" }
            }
            return (origin[..<schemeEnd.lowerBound], host)
        }
        guard let a = schemeAndHost(one), let b = schemeAndHost(other), a.scheme == b.scheme, a.host == b.host else {
            return false
        }
        return a.host == "localhost" || IPAddress(parsing: a.host)?.classify().kind == .loopback
    }

    init(_ exchange: HARExchange) {
        self.init(method: exchange.method.rawValue, url: exchange.url, headers: exchange.requestHeaders, body: exchange.requestBody)
    }

    /// How `recorded` differs from this request under `matching`: empty when it answers it.
    func differences(from recorded: ReplayProbe, matching: ReplayMatching) -> [String] {
        var differences: [String] = []
        if method != recorded.method { differences.append("method \(method), recorded \(recorded.method)") }
        if origin != recorded.origin && !(matching.anyLoopbackPort && Self.sameLoopbackHost(origin, recorded.origin)) {
            differences.append("origin \(origin), recorded \(recorded.origin)")
        }
        if path != recorded.path { differences.append("path \(path), recorded \(recorded.path)") }
        if !Self.matches(query, recorded: recorded.query) {
            let text = { (pairs: [Pair]) in pairs.map { "\($0.name)=\($0.value)" }.joined(separator: "&") }
            differences.append("query \(text(query).debugDescription), recorded \(text(recorded.query).debugDescription)")
        }
        for name in matching.headers {
            let mine = headers[values: name]
            let theirs = recorded.headers[values: name]
            let redacted = theirs.count == mine.count && theirs.allSatisfy { $0 == HARRedaction.placeholder }
            if mine != theirs && !redacted { differences.append("header \(name)") }
        }
        if matching.body && (body ?? Data()) != (recorded.body ?? Data()) {
            differences.append("body (\(body?.count ?? 0) bytes, recorded \(recorded.body?.count ?? 0))")
        }
        return differences
    }

    private static func matches(_ pairs: [Pair], recorded: [Pair]) -> Bool {
        guard pairs.count == recorded.count else { return false }
        if pairs == recorded { return true }
        // A redacted value matches any: compare names, and values where the recording kept them.
        var unmatched = pairs
        for pair in recorded {
            let index =
                pair.value == HARRedaction.placeholder
                ? unmatched.firstIndex { $0.name == pair.name }
                : unmatched.firstIndex(of: pair)
            guard let index else { return false }
            unmatched.remove(at: index)
        }
        return true
    }

    /// `METHOD URL`, as messages name a request.
    var summary: String {
        let query = self.query.isEmpty ? "" : "?" + self.query.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
        return "\(method) \(origin)\(path)\(query)"
    }
}

/// Which recorded exchange answers each request: a pure decision, kept apart from the transport.
///
/// Among the exchanges that match, the first not yet served answers; when all of them have
/// been, the last repeats (a poll, a retry). A request no exchange matches gets the closest one
/// named — the one with fewest differences, the earliest among equals — and how it differs.
package struct ReplayIndex: Sendable {
    package enum Decision: Sendable, Hashable {
        /// The exchange at this index answers.
        case answer(Int)
        /// None answers; the closest, with its differences, or `nil` for an empty recording.
        case unmatched(closest: Int?, differences: [String])
    }

    let probes: [ReplayProbe]
    let matching: ReplayMatching
    private(set) var served: [Int]

    package init(_ exchanges: [HARExchange], matching: ReplayMatching) {
        probes = exchanges.map(ReplayProbe.init)
        self.matching = matching
        served = Array(repeating: 0, count: exchanges.count)
    }

    package mutating func decide(_ request: ReplayProbe) -> Decision {
        var matches: [Int] = []
        var closest: (index: Int, differences: [String])? = nil
        for (index, probe) in probes.enumerated() {
            let differences = request.differences(from: probe, matching: matching)
            if differences.isEmpty {
                matches.append(index)
            } else if closest == nil || differences.count < closest!.differences.count {
                closest = (index, differences)
            }
        }
        guard let last = matches.last else {
            return .unmatched(closest: closest?.index, differences: closest?.differences ?? [])
        }
        let chosen = matches.first { served[$0] == 0 } ?? last
        served[chosen] += 1
        return .answer(chosen)
    }

    /// The message for a request no exchange answers.
    func unmatchedMessage(_ request: ReplayProbe, closest: Int?, differences: [String], source: String) -> String {
        var message = "no recorded exchange in \(source) matches \(request.summary)"
        if let closest {
            message += "; the closest is #\(closest) \(probes[closest].summary), which differs in "
            message += differences.joined(separator: "; ")
        } else {
            message += "; the recording is empty"
        }
        return message
    }
}
