import FoundationEssentials
import HTTPTypes

/// The response cache's decisions, with no I/O: what to do before a request (use the stored
/// response, revalidate it, go to the server, fail) and after the server answered (store,
/// refresh, fall back). ``Session``'s cache shell applies them; `CacheRulesTests` checks them
/// row by row.
package enum CacheRules {
    /// What the rules read of a stored response at the time of a request.
    package struct Stored: Sendable, Hashable {
        /// Its current age.
        package var age: Duration
        /// How long it stays fresh.
        package var lifetime: Duration
        /// Its `Cache-Control` directives.
        package var control: CacheControl
        /// Whether it carries `ETag` or `Last-Modified`.
        package var hasValidators: Bool

        package init(age: Duration, lifetime: Duration, control: CacheControl = CacheControl(), hasValidators: Bool = false) {
            self.age = age
            self.lifetime = lifetime
            self.control = control
            self.hasValidators = hasValidators
        }

        package init(_ facts: StoredResponseFacts, now: Date) {
            self.init(
                age: facts.age(at: now),
                lifetime: facts.lifetime,
                control: facts.control,
                hasValidators: facts.hasValidators
            )
        }

        /// How long past its lifetime it is (negative while fresh).
        package var staleness: Duration { age - lifetime }
        /// Whether it is still fresh.
        package var isFresh: Bool { age < lifetime }
        /// Whether a directive forbids using it stale without revalidation (RFC 9111 §4.2.4).
        package var forbidsStale: Bool { control.noCache || control.mustRevalidate }
    }

    /// What to do before sending.
    package enum Lookup: Sendable, Hashable {
        /// Deliver the stored response; no network I/O.
        case useStored(stale: Bool)
        /// Deliver the stale stored response now and revalidate it in the background
        /// (`stale-while-revalidate`).
        case useStoredAndRevalidate
        /// Deliver the stored response now, then go to the server (``CachePolicy/cacheThenNetwork``).
        case useStoredThenFetch(conditional: Bool)
        /// Go to the server; `conditional`: with the stored response's validators.
        case fetch(conditional: Bool)
        /// Fail with ``BrickError/Code/notCached``: the cache alone was asked and has nothing usable.
        case miss
    }

    /// How the server's side of the exchange ended, as the rules see it.
    package enum NetworkResult: Sendable, Hashable {
        /// A response with this status (not `304`).
        case response(status: Int)
        /// A `304`; `selectsStored`: its validators select the stored response
        /// (``notModifiedSelects(entityTag:lastModified:notModified:)``).
        case notModified(selectsStored: Bool)
        /// No response, for a reason that means the server could not be reached: no route, cannot
        /// connect or resolve, timeout, connection reset.
        case unreachable
        /// Any other failure (cancelled, refused by a rule, a bad response).
        case failed
    }

    /// What to do with the server's answer.
    package enum AfterNetwork: Sendable, Hashable {
        /// Deliver the server's response (or failure); `store`: keep it, if it is storable.
        case deliverNetwork(store: Bool)
        /// `304` to a conditional request: refresh the stored response's header fields and deliver
        /// its body.
        case deliverRevalidated
        /// `304` to a conditional request whose validators do not select the stored response (a
        /// different strong `ETag`: RFC 9111 §4.3.4): the stored response is out of date and is not
        /// refreshed; send the request again, unconditionally.
        case refetchUnconditionally
        /// Deliver the stored response, flagged stale, in place of the failure.
        case deliverStoredAsFallback
    }

    /// The decision before sending. `stored` is the stored response matching the request, if any.
    package static func lookup(policy: CachePolicy, request: CacheControl, stored: Stored?) -> Lookup {
        switch policy {
        case .networkOnly:
            return .fetch(conditional: false)
        case .cacheOnly:
            guard let stored else { return .miss }
            return .useStored(stale: !stored.isFresh)
        case .cacheElseNetwork:
            guard let stored else { return .fetch(conditional: false) }
            return .useStored(stale: !stored.isFresh)
        case .networkElseCache:
            return .fetch(conditional: stored?.hasValidators ?? false)
        case .cacheThenNetwork:
            guard let stored else { return .fetch(conditional: false) }
            return .useStoredThenFetch(conditional: stored.hasValidators)
        case .http:
            return httpLookup(request: request, stored: stored)
        }
    }

    private static func httpLookup(request: CacheControl, stored: Stored?) -> Lookup {
        guard let stored else { return request.onlyIfCached ? .miss : .fetch(conditional: false) }
        let mayUseStored = !request.noCache && !stored.control.noCache
        if mayUseStored {
            var freshEnough = stored.age + (request.minFresh ?? .zero) < stored.lifetime
            if let maxAge = request.maxAge, stored.age > maxAge { freshEnough = false }
            if freshEnough { return .useStored(stale: false) }
            if !stored.forbidsStale, stored.staleness >= .zero {
                if let maxStale = request.maxStale, stored.staleness <= maxStale {
                    return .useStored(stale: true)
                }
                if let window = stored.control.staleWhileRevalidate, stored.staleness <= window, !request.onlyIfCached {
                    return .useStoredAndRevalidate
                }
            }
        }
        if request.onlyIfCached { return .miss }
        return .fetch(conditional: stored.hasValidators)
    }

    /// The decision after the server answered (or failed). `stored` is the stored response the
    /// lookup found; `conditional`: whether the request carried its validators.
    package static func afterNetwork(
        policy: CachePolicy,
        stored: Stored?,
        conditional: Bool,
        result: NetworkResult
    ) -> AfterNetwork {
        if case .notModified(let selectsStored) = result, conditional, stored != nil {
            return selectsStored ? .deliverRevalidated : .refetchUnconditionally
        }
        guard let stored, mayFallBack(policy: policy, stored: stored) else {
            return .deliverNetwork(store: !isServerError(result))
        }
        switch result {
        case .unreachable:
            // `mayFallBack` said the stored response may stand in for exactly this.
            return .deliverStoredAsFallback
        case .response(let status) where serverErrors.contains(status):
            return allowsStaleIfError(stored) ? .deliverStoredAsFallback : .deliverNetwork(store: false)
        case .response, .notModified, .failed:
            return .deliverNetwork(store: true)
        }
    }

    /// Whether a `304` selects the stored response whose validators are `entityTag` and
    /// `lastModified` (RFC 9111 §4.3.4): a strong `ETag` in the `304` selects only a stored response
    /// with the same strong tag; a weak one, a stored tag that matches it weakly; otherwise its
    /// `Last-Modified` must equal the stored one. A `304` with no validator at all selects the
    /// response whose validators the request carried (servers that omit them are common).
    package static func notModifiedSelects(entityTag: String?, lastModified: String?, notModified fields: HTTPFields) -> Bool {
        if let tag = fields[.eTag]?.trimmingSpacesAndTabs() {
            guard let stored = entityTag?.trimmingSpacesAndTabs() else { return false }
            if tag.hasPrefix("W/") || stored.hasPrefix("W/") {
                // Weak comparison: the opaque tags match, whatever their weakness (RFC 9110 §8.8.3.2).
                return tag.dropWeakPrefix() == stored.dropWeakPrefix()
            }
            return tag == stored
        }
        if let modified = fields[.lastModified]?.trimmingSpacesAndTabs() {
            return lastModified?.trimmingSpacesAndTabs() == modified
        }
        return true
    }

    /// Whether a failure could be answered with `stored` under `policy`: decides, before sending,
    /// whether the endpoint's retries are worth waiting for (they are skipped when a stored
    /// response would stand in).
    package static func mayFallBack(policy: CachePolicy, stored: Stored) -> Bool {
        switch policy {
        case .networkElseCache: return true
        case .http: return allowsStaleIfError(stored)
        case .networkOnly, .cacheOnly, .cacheElseNetwork, .cacheThenNetwork: return false
        }
    }

    /// `stale-if-error` covers the stored response now, and no directive forbids using it stale.
    private static func allowsStaleIfError(_ stored: Stored) -> Bool {
        guard !stored.forbidsStale, let window = stored.control.staleIfError else { return false }
        return stored.staleness <= window
    }

    /// The server failing, as ``serverErrors`` has it (one definition for every rule).
    private static func isServerError(_ result: NetworkResult) -> Bool {
        if case .response(let status) = result { return serverErrors.contains(status) }
        return false
    }

    /// The statuses `stale-if-error` and ``CachePolicy/networkElseCache`` treat as the server
    /// failing (RFC 5861 §4).
    package static let serverErrors: Set<Int> = [500, 502, 503, 504]

    /// Whether a response may be stored (RFC 9111 §3), given the exchange's facts.
    package struct Storability: Sendable, Hashable {
        /// The request method.
        package var method: HTTPRequest.Method
        /// The response status.
        package var status: Int
        /// The request's directives.
        package var request: CacheControl
        /// The response's directives.
        package var response: CacheControl
        /// Whether the response carries `Expires`.
        package var hasExpires: Bool
        /// Whether the request carried credentials (``CredentialFields``, or an authenticator signed
        /// it): its response may be made for this user only.
        package var isAuthorized: Bool
        /// Whether the endpoint stores responses to authorized requests anyway.
        package var storesAuthorized: Bool
        /// `Vary: *`.
        package var variesOnEverything: Bool
        /// Whether the whole body is in memory (not a file, a stream, or a part).
        package var bodyInMemory: Bool

        package init(
            method: HTTPRequest.Method,
            status: Int,
            request: CacheControl = CacheControl(),
            response: CacheControl = CacheControl(),
            hasExpires: Bool = false,
            isAuthorized: Bool = false,
            storesAuthorized: Bool = false,
            variesOnEverything: Bool = false,
            bodyInMemory: Bool = true
        ) {
            self.method = method
            self.status = status
            self.request = request
            self.response = response
            self.hasExpires = hasExpires
            self.isAuthorized = isAuthorized
            self.storesAuthorized = storesAuthorized
            self.variesOnEverything = variesOnEverything
            self.bodyInMemory = bodyInMemory
        }

        /// The verdict.
        package var isStorable: Bool {
            guard method == .get || method == .head, bodyInMemory, !variesOnEverything else { return false }
            guard status >= 200, status != 206, status != 304 else { return false }
            guard !request.noStore, !response.noStore else { return false }
            if isAuthorized && !storesAuthorized
                && !(response.isPublic || response.sharedMaxAge != nil || response.mustRevalidate)
            {
                return false
            }
            return response.maxAge != nil || hasExpires || response.isPublic || response.isPrivate
                || StoredResponseFacts.heuristicallyCacheable.contains(status)
        }
    }

    /// The header fields of a stored response refreshed by a `304` (RFC 9111 §3.2, §4.3.4): each
    /// field of the `304` replaces the stored ones of its name, except `Content-Length` and
    /// `Set-Cookie`; hop-by-hop fields are not kept.
    package static func refreshed(_ stored: HTTPFields, with notModified: HTTPFields) -> HTTPFields {
        var result = stored
        var replaced: Set<HTTPField.Name> = []
        for field in notModified where field.name != .contentLength && !isHopByHop(field.name) && !isSetCookie(field.name) {
            if replaced.insert(field.name).inserted { result[field.name] = nil }
            result.append(field)
        }
        return result
    }

    /// The fields a cache does not store (RFC 9111 §3.1, RFC 9110 §7.6.1), and `Set-Cookie`: a
    /// cookie set for one exchange is never replayed to another.
    package static func storedFields(_ fields: HTTPFields) -> HTTPFields {
        let connectionOptions = Set(
            fields[values: .connection].flatMap { $0.split(separator: ",") }.compactMap {
                HTTPField.Name($0.trimmingSpacesAndTabs())
            }
        )
        return HTTPFields(
            fields.filter {
                !isHopByHop($0.name) && !connectionOptions.contains($0.name) && !isSetCookie($0.name)
            }
        )
    }

    /// `Set-Cookie` (and the obsolete `Set-Cookie2`): never stored, never refreshed from a `304`.
    private static func isSetCookie(_ name: HTTPField.Name) -> Bool {
        name == .setCookie || name.canonicalName == "set-cookie2"
    }

    private static func isHopByHop(_ name: HTTPField.Name) -> Bool {
        switch name.canonicalName {
        case "connection", "keep-alive", "proxy-connection", "te", "transfer-encoding", "upgrade",
            "proxy-authenticate", "proxy-authorization", "trailer":
            return true
        default:
            return false
        }
    }
}

/// The request header fields that carry a user's credentials: `Authorization`, `Cookie`,
/// `Proxy-Authorization`. A response to a request carrying one is not stored unless it says
/// `public` (or the endpoint opts in), and the offline queue refuses to write them to disk.
package enum CredentialFields {
    /// Their names, lowercased.
    package static let names: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    /// Whether `fields` carry any of them.
    package static func present(in fields: HTTPFields) -> Bool {
        fields.contains { names.contains($0.name.canonicalName) }
    }
}

extension String {
    fileprivate func dropWeakPrefix() -> Substring { hasPrefix("W/") ? dropFirst(2) : self[...] }
}
