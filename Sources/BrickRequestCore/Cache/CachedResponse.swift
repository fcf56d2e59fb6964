import FoundationEssentials
public import HTTPTypes

/// What identifies stored responses: the method and the URL, its query items in a canonical order.
///
/// `https://API.example.com:443/items?b=2&a=1#top` and `https://api.example.com/items?a=1&b=2` are
/// the same key: scheme and host lowercased, the default port and the fragment dropped, query items
/// sorted by name (items of the same name keep their order). The request fields a response
/// varies on (`Vary`) tell its variants apart: ``CachedResponse/variant``.
public struct CacheKey: Sendable, Hashable, CustomStringConvertible {
    /// `GET` or `HEAD`.
    public let method: String
    /// The canonical URL.
    public let url: String

    /// The key of a request to `url` with `method`.
    ///
    /// - Parameters:
    ///   - method: The request method.
    ///   - url: An absolute URL.
    public init(method: String, url: String) {
        self.method = method.uppercased()
        self.url = Self.canonical(url)
    }

    /// `METHOD url`.
    public var description: String { "\(method) \(url)" }

    /// The URL with a lowercased scheme and host, no default port, no fragment, and its query items
    /// stably sorted by name.
    static func canonical(_ url: String) -> String {
        var rest = Substring(url)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        var query: Substring? = nil
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        var result = ""
        if let colon = rest.firstIndex(of: ":"), rest[colon...].hasPrefix("://") {
            let scheme = rest[..<colon].lowercased()
            let afterScheme = rest[rest.index(colon, offsetBy: 3)...]
            let authorityEnd = afterScheme.firstIndex(of: "/") ?? afterScheme.endIndex
            var authority = afterScheme[..<authorityEnd].lowercased()
            if (scheme == "http" && authority.hasSuffix(":80")) || (scheme == "https" && authority.hasSuffix(":443")) {
                authority = String(authority[..<authority.lastIndex(of: ":")!])
            }
            let path = afterScheme[authorityEnd...]
            result = scheme + "://" + authority + (path.isEmpty ? "/" : String(path))
        } else {
            result = String(rest)
        }
        if let query, !query.isEmpty {
            let items = query.split(separator: "&", omittingEmptySubsequences: true)
            let sorted = items.enumerated().sorted { lhs, rhs in
                let (left, right) = (Self.name(lhs.element), Self.name(rhs.element))
                return left == right ? lhs.offset < rhs.offset : left < right
            }
            result += "?" + sorted.map { String($0.element) }.joined(separator: "&")
        }
        return result
    }

    private static func name(_ item: Substring) -> Substring {
        item.firstIndex(of: "=").map { item[..<$0] } ?? item
    }
}

/// A stored response: what a ``ResponseCache`` keeps, and what the cache rules read.
///
/// Besides the response itself it keeps the times of the exchange that produced it, from which
/// its age is computed (RFC 9111 §4.2.3), and the request's values of the fields its `Vary` names.
/// The facts the rules need (`Cache-Control`, validators, the freshness lifetime) are read from the
/// header fields once, when the value is made.
public struct CachedResponse: Sendable {
    /// The key it is stored under.
    public let key: CacheKey
    /// The request's values of the fields named by the response's `Vary`, `name: value` lines in
    /// the order `Vary` gives them; empty without `Vary`.
    public let variant: String
    /// The status code.
    public let status: Int
    /// The response's header fields (hop-by-hop fields removed).
    public let headerFields: HTTPFields
    /// The body.
    public let body: Data
    /// The URL that produced it (after redirects).
    public let url: String
    /// When the request that produced it (or last revalidated it) was sent.
    public let requestTime: Date
    /// When its response arrived.
    public let responseTime: Date
    /// What the rules read, parsed once.
    package let facts: StoredResponseFacts

    /// Creates a stored response.
    ///
    /// - Parameters:
    ///   - key: The key.
    ///   - variant: The request's values of the fields named by `Vary` (see ``variant``).
    ///   - status: The status code.
    ///   - headerFields: The response's header fields.
    ///   - body: The body.
    ///   - url: The URL that produced it.
    ///   - requestTime: When the request was sent.
    ///   - responseTime: When the response arrived.
    public init(
        key: CacheKey,
        variant: String,
        status: Int,
        headerFields: HTTPFields,
        body: Data,
        url: String,
        requestTime: Date,
        responseTime: Date
    ) {
        self.init(
            key: key,
            variant: variant,
            status: status,
            headerFields: headerFields,
            facts: StoredResponseFacts(status: status, fields: headerFields, requestTime: requestTime, responseTime: responseTime),
            body: body,
            url: url,
            requestTime: requestTime,
            responseTime: responseTime
        )
    }

    /// Creates a stored response whose ``facts`` were computed before from the same header fields,
    /// status and times (a store that keeps what it parsed: ``StoredResponseFacts`` depends on
    /// nothing else).
    package init(
        key: CacheKey,
        variant: String,
        status: Int,
        headerFields: HTTPFields,
        facts: StoredResponseFacts,
        body: Data,
        url: String,
        requestTime: Date,
        responseTime: Date
    ) {
        self.key = key
        self.variant = variant
        self.status = status
        self.headerFields = headerFields
        self.body = body
        self.url = url
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.facts = facts
    }

    /// Whether a `304` with these header fields confirms this response (RFC 9111 §4.3.4:
    /// ``CacheRules/notModifiedSelects(entityTag:lastModified:notModified:)``).
    package func isSelected(byNotModified fields: HTTPFields) -> Bool {
        CacheRules.notModifiedSelects(entityTag: facts.entityTag, lastModified: facts.lastModified, notModified: fields)
    }

    /// This response as a `304 Not Modified` to a revalidation refreshed it (RFC 9111 §4.3.4): the
    /// `304`'s header fields replace its own (``CacheRules/refreshed(_:with:)``), the body stays,
    /// and its age counts from the revalidating exchange.
    ///
    /// - Parameters:
    ///   - notModified: The `304`'s header fields.
    ///   - requestTime: When the revalidation was sent.
    ///   - responseTime: When the `304` arrived.
    package func refreshed(with notModified: HTTPFields, requestTime: Date, responseTime: Date) -> CachedResponse {
        CachedResponse(
            key: key,
            variant: variant,
            status: status,
            headerFields: CacheRules.refreshed(headerFields, with: notModified),
            body: body,
            url: url,
            requestTime: requestTime,
            responseTime: responseTime
        )
    }

    /// Bytes it takes, roughly: body, header fields, key and URL.
    public var byteCount: Int {
        var count = body.count + key.url.utf8.count + url.utf8.count + variant.utf8.count + 64
        for field in headerFields { count += field.name.rawName.utf8.count + field.value.utf8.count + 4 }
        return count
    }

    /// The header fields as `Name: value\r\n` lines, for a store to keep.
    public var rawHeaders: [UInt8] { headerFields.rawHeaderBytes }

    /// Parses header fields kept by `rawHeaders`.
    ///
    /// - Parameter raw: `Name: value\r\n` lines.
    /// - Returns: The fields.
    public static func headerFields(fromRaw raw: [UInt8]) -> HTTPFields {
        HeaderParser.fields(from: raw)
    }

    /// Whether this response may answer a request with `fields`: the values of the fields its
    /// `Vary` names are the same as those of the request that produced it (`Vary: *` never matches).
    ///
    /// - Parameter fields: The new request's header fields.
    public func matches(requestFields fields: HTTPFields) -> Bool {
        guard let names = facts.varyNames else { return false }
        return Self.variant(names: names, of: fields) == variant
    }

    /// The ``variant`` string for a request with `fields` answered by a response varying on `names`.
    static func variant(names: [HTTPField.Name], of fields: HTTPFields) -> String {
        guard !names.isEmpty else { return "" }
        var result = ""
        for name in names {
            let value = fields[values: name].map { $0.trimmingSpacesAndTabs() }.joined(separator: ", ")
            result += name.canonicalName + ": " + value + "\n"
        }
        return result
    }
}

/// The facts of a stored response that the cache rules read, computed from its header fields and
/// the exchange's times once (RFC 9111 §4.2).
package struct StoredResponseFacts: Sendable, Hashable {
    /// Its `Cache-Control` directives.
    package var control: CacheControl
    /// Its age when it arrived, corrected for the exchange's delay (`corrected_initial_age`).
    package var initialAge: Duration
    /// When it arrived (`response_time`): the age grows from here.
    package var responseTime: Date
    /// How long it stays fresh.
    package var lifetime: Duration
    /// Whether ``lifetime`` is a heuristic (no explicit expiry).
    package var isHeuristic: Bool
    /// Its `ETag`.
    package var entityTag: String?
    /// Its `Last-Modified`.
    package var lastModified: String?
    /// The request fields it varies on; `nil` for `Vary: *`.
    package var varyNames: [HTTPField.Name]?

    package init(status: Int, fields: HTTPFields, requestTime: Date, responseTime: Date) {
        // One walk over the fields for all the rules read (a lookup by name walks them all, each time).
        var read = RuleFields()
        for field in fields { read.note(field) }
        control = CacheControl(cacheControl: read.cacheControl, pragma: read.pragma)
        self.responseTime = responseTime
        let date = read.date.flatMap { HTTPDate.parse($0, now: responseTime) }
        // The first value of the first `Age` line (RFC 9111 §5.1); one too large counts as 2^31.
        let ageValue = read.age
            .flatMap { $0.split(separator: ",", omittingEmptySubsequences: false).first?.trimmingSpacesAndTabs().deltaSecondsValue }
            .map { Duration.seconds($0) } ?? .zero
        let apparentAge = max(.zero, Duration.seconds(responseTime.timeIntervalSince(date ?? responseTime)))
        let responseDelay = max(.zero, Duration.seconds(responseTime.timeIntervalSince(requestTime)))
        initialAge = max(apparentAge, ageValue + responseDelay)
        entityTag = read.entityTag
        lastModified = read.lastModified
        isHeuristic = false
        if control.hasInvalidFreshness {
            lifetime = .zero
        } else if let maxAge = control.maxAge {
            lifetime = maxAge
        } else if let expires = read.expires {
            // An invalid date ("0") means already expired (RFC 9111 §5.3).
            let expiry = HTTPDate.parse(expires, now: responseTime)
            lifetime = expiry.map { max(.zero, Duration.seconds($0.timeIntervalSince(date ?? responseTime))) } ?? .zero
        } else if let lastModified, let modified = HTTPDate.parse(lastModified, now: responseTime),
            control.isPublic || Self.heuristicallyCacheable.contains(status)
        {
            // RFC 9111 §4.2.2: a fraction of the time since the last change; 10 %, at most a day.
            let sinceChange = (date ?? responseTime).timeIntervalSince(modified)
            lifetime = min(.seconds(86_400), Duration.seconds(max(0, sinceChange) / 10))
            isHeuristic = true
        } else {
            lifetime = .zero
        }
        varyNames = Self.varyNames(inValues: read.vary)
    }

    /// The values of the fields the rules read, gathered in one walk: a field given on several
    /// lines reads as its values joined by `, ` (as `HTTPFields`' subscript joins them).
    private struct RuleFields {
        var cacheControl: [String] = []
        var pragma: String?
        var date: String?
        /// The first `Age` line only.
        var age: String?
        var entityTag: String?
        var lastModified: String?
        var expires: String?
        var vary: [String] = []

        mutating func note(_ field: HTTPField) {
            switch field.name {
            case .cacheControl: cacheControl.append(field.value)
            case .date: Self.join(&date, field.value)
            case .age: if age == nil { age = field.value }
            case .eTag: Self.join(&entityTag, field.value)
            case .lastModified: Self.join(&lastModified, field.value)
            case .expires: Self.join(&expires, field.value)
            case .vary: vary.append(field.value)
            case .pragma: Self.join(&pragma, field.value)
            default: break
            }
        }

        private static func join(_ existing: inout String?, _ value: String) {
            existing = existing.map { $0 + ", " + value } ?? value
        }
    }

    /// The request fields named by `Vary` in `fields` (lowercase, each once, in order); `nil` for
    /// `Vary: *`, which no request matches.
    package static func varyNames(in fields: HTTPFields) -> [HTTPField.Name]? {
        varyNames(inValues: fields[values: .vary])
    }

    /// The request fields named by the `Vary` values `values`; `nil` for `*`.
    private static func varyNames(inValues values: some Sequence<String>) -> [HTTPField.Name]? {
        var names: [HTTPField.Name] = []
        for value in values {
            for item in value.split(separator: ",") {
                let text = item.trimmingSpacesAndTabs()
                if text == "*" { return nil }
                if let name = HTTPField.Name(text), !names.contains(name) { names.append(name) }
            }
        }
        return names
    }

    /// Its current age at `now` (RFC 9111 §4.2.3).
    ///
    /// A response that arrived more than ``clockStepTolerance`` after `now` was stored before the
    /// wall clock stepped back (NTP, a VM resumed, a hand-set clock): how long it has been kept is
    /// unknown, so its age is the most RFC 9111 §1.2.2 allows (2^31 s) and it is stale — revalidated,
    /// never served fresh for as long again as the step (RFC 9111's `max(0, …)` would keep it
    /// fresh until the clock caught up: an hour's step, an hour more).
    package func age(at now: Date) -> Duration {
        let resident = now.timeIntervalSince(responseTime)
        if resident < -Self.clockStepTolerance.seconds { return Self.unknownAge }
        return initialAge + max(.zero, Duration.seconds(resident))
    }

    /// How far a stored response may seem to come from the future before the clock is taken to
    /// have stepped back: more than the skew between two processes' reads of one clock.
    package static let clockStepTolerance: Duration = .seconds(2)

    /// The age of a response whose age cannot be known: 2^31 seconds (RFC 9111 §1.2.2).
    package static let unknownAge: Duration = .seconds(2_147_483_648)

    /// Whether it has a validator to revalidate with.
    package var hasValidators: Bool { entityTag != nil || lastModified != nil }

    /// Statuses a cache may give a heuristic lifetime (RFC 9110 §15.1).
    package static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]
}
