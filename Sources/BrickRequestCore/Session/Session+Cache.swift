import FoundationEssentials
import HTTPTypes
import Logging
import Synchronization

/// The response cache's I/O shell around an exchange: reads the store, asks ``CacheRules`` what
/// to do, sends (conditionally) when they say so, and stores or refreshes what comes back. Every
/// decision is the rules'; this file only carries them out.
extension Session {
    /// Runs a request of a ``CachedResponseType`` endpoint. `early` receives the stored response
    /// that ``CachePolicy/cacheThenNetwork`` delivers before the server's; the returned outcome is
    /// the last delivery.
    nonisolated(nonsending) func runCached(
        _ prepared: PreparedRequest,
        caching: ResponseCaching,
        request: TransportRequest,
        lifecycle: RequestLifecycle,
        early: (@Sendable (Outcome) -> Void)?
    ) async -> Outcome {
        guard Self.usesCache(request) else {
            let outcome = await run(prepared, request: request, lifecycle: lifecycle)
            invalidate(after: outcome, of: request, in: caching.cache)
            return outcome
        }
        let key = CacheKey(method: request.method.rawValue, url: request.urlString)
        var exchange = CacheExchange(key: key, caching: caching, request: request)
        do throws(BrickError) {
            exchange.variants = try caching.cache.cachedResponses(for: key)
        } catch {
            prepared.logger.warning(
                "the response cache could not be read",
                metadata: ["brick.cache.key": "\(key)", "error.message": "\(error)"]
            )
            if caching.policy == .cacheOnly {
                _ = lifecycle.complete()
                return .failed(error, request: request)
            }
        }
        exchange.stored = exchange.variants.first { $0.matches(requestFields: request.headerFields) }
        let now = Date()
        let facts = exchange.stored.map { CacheRules.Stored($0.facts, now: now) }
        exchange.facts = facts
        let lookup = CacheRules.lookup(policy: caching.policy, request: CacheControl(request.headerFields), stored: facts)
        switch lookup {
        case .miss:
            prepared.observation?.cacheDidAnswer(.miss)
            _ = lifecycle.complete()
            return .failed(
                BrickError(.notCached, message: "the cache holds no usable response for \(key)"),
                request: request
            )
        case .useStored(let stale):
            prepared.observation?.cacheDidAnswer(.hit)
            return storedOutcome(exchange, prepared: prepared, now: now, stale: stale, lifecycle: lifecycle)
        case .useStoredAndRevalidate:
            prepared.observation?.cacheDidAnswer(.hit)
            revalidateInBackground(exchange, prepared: prepared)
            return storedOutcome(exchange, prepared: prepared, now: now, stale: true, lifecycle: lifecycle)
        case .useStoredThenFetch(let conditional):
            if let early, let facts {
                prepared.observation?.cacheDidAnswer(.hit)
                early(storedOutcome(exchange, prepared: prepared, now: now, stale: !facts.isFresh, lifecycle: nil))
            }
            return await fetch(exchange, prepared: prepared, conditional: conditional, lifecycle: lifecycle)
        case .fetch(let conditional):
            return await fetch(exchange, prepared: prepared, conditional: conditional, lifecycle: lifecycle)
        }
    }

    /// What one cached request knows: its key, settings, the stored variants and the one matching.
    struct CacheExchange: Sendable {
        let key: CacheKey
        let caching: ResponseCaching
        let request: TransportRequest
        var variants: [CachedResponse] = []
        var stored: CachedResponse?
        var facts: CacheRules.Stored?

        init(key: CacheKey, caching: ResponseCaching, request: TransportRequest) {
            self.key = key
            self.caching = caching
            self.request = request
        }
    }

    /// Whether the cache takes part: `GET` or `HEAD`, the body to memory, and no conditional or
    /// range field of the caller's own (its answer is for the caller, not for the cache).
    private static func usesCache(_ request: TransportRequest) -> Bool {
        guard request.method == .get || request.method == .head, case .memory = request.options.destination else {
            return false
        }
        let fields = request.headerFields
        return fields[.ifNoneMatch] == nil && fields[.ifModifiedSince] == nil && fields[.ifMatch] == nil
            && fields[.ifUnmodifiedSince] == nil && fields[.ifRange] == nil && fields[.range] == nil
    }

    /// The stored response as an outcome: validated like a response from the network, with no
    /// network I/O. `lifecycle`: completed here when this is the request's last delivery.
    private func storedOutcome(
        _ exchange: CacheExchange,
        prepared: PreparedRequest,
        now: Date,
        stale: Bool,
        lifecycle: RequestLifecycle?,
        source: ResponseSource = .cache
    ) -> Outcome {
        guard let stored = exchange.stored else {
            // The lookup said a stored response exists: reaching here is a bug, reported as such.
            return .failed(BrickError(.notCached, message: "internal: no stored response to deliver"), request: exchange.request)
        }
        let age = stored.facts.age(at: now)
        let response = Self.transportResponse(stored, age: age)
        var outcome: Outcome
        if let lifecycle, !lifecycle.complete() {
            outcome = .failed(.cancelled, request: exchange.request)
        } else {
            do throws(BrickError) {
                if let validation = prepared.validation { try validation.validate(response) }
                outcome = Outcome(request: exchange.request, ending: .validated(response))
            } catch {
                outcome = Outcome(request: exchange.request, ending: .failed(error, response))
            }
        }
        outcome.source = source
        outcome.isStale = stale
        outcome.age = age
        return outcome
    }

    /// A stored response as the transport would have delivered it, its `Age` field set to `age`
    /// (RFC 9111 §5.1).
    private static func transportResponse(_ stored: CachedResponse, age: Duration) -> TransportResponse {
        var fields = stored.headerFields
        fields[.age] = String(age.wholeSeconds)
        return TransportResponse(
            status: HTTPResponse.Status(code: stored.status),
            headerFields: fields,
            body: stored.body,
            url: stored.url
        )
    }

    /// Sends the request (with the stored response's validators when `conditional`) and applies
    /// the rules to the answer: store, refresh, or fall back.
    private nonisolated(nonsending) func fetch(
        _ exchange: CacheExchange,
        prepared: PreparedRequest,
        conditional: Bool,
        lifecycle: RequestLifecycle
    ) async -> Outcome {
        var prepared = prepared
        if let facts = exchange.facts, CacheRules.mayFallBack(policy: exchange.caching.policy, stored: facts) {
            // A stored response stands in for a failure: deliver it now rather than after retries.
            prepared.retry.maxRetryCount = 0
            prepared.retry.enableBackgroundRetry = false
        }
        let sent = conditional ? Self.conditional(exchange.request, on: exchange.stored) : exchange.request
        willStart(sent, prepared)
        let requestTime = Date()
        let result = await self.exchange(prepared, request: sent, lifecycle: lifecycle)
        let responseTime = Date()
        let transportResult: Result<TransportResponse, TransportError>
        switch result {
        case .failure(let error):
            _ = lifecycle.complete()
            return .failed(error, request: sent, retryCount: lifecycle.retryCount)
        case .success(let outcome):
            transportResult = outcome
        }
        let networkResult: CacheRules.NetworkResult
        switch transportResult {
        case .success(let response) where response.status.code == 304:
            networkResult = .notModified(selectsStored: exchange.stored?.isSelected(byNotModified: response.headerFields) ?? false)
        case .success(let response): networkResult = .response(status: response.status.code)
        case .failure(let error):
            networkResult = RetryClassification.meansUnreachable(error.kind) && !lifecycle.isCancelled ? .unreachable : .failed
        }
        let decision = CacheRules.afterNetwork(
            policy: exchange.caching.policy,
            stored: exchange.facts,
            conditional: conditional,
            result: networkResult
        )
        switch decision {
        case .deliverRevalidated:
            guard case .success(let notModified) = transportResult, let stored = exchange.stored else { break }
            prepared.observation?.cacheDidAnswer(.revalidated)
            let refreshed = stored.refreshed(
                with: notModified.headerFields,
                requestTime: requestTime,
                responseTime: responseTime
            )
            keep(refreshed, in: exchange.caching.cache)
            let age = refreshed.facts.age(at: responseTime)
            var response = Self.transportResponse(refreshed, age: age)
            response.metrics = notModified.metrics
            var outcome = finish(prepared, request: sent, result: .success(response), lifecycle: lifecycle)
            outcome.source = .revalidated
            outcome.age = age
            return outcome
        case .refetchUnconditionally:
            // The stored response is out of date: the server's current one has another tag.
            for monitor in eventMonitors { monitor.request(sent, didCompleteWith: transportResult) }
            forget(exchange.key, in: exchange.caching.cache)
            prepared.logger.debug(
                "a 304 did not select the stored response; sending again",
                metadata: ["brick.cache.key": "\(exchange.key)"]
            )
            return await fetch(exchange, prepared: prepared, conditional: false, lifecycle: lifecycle)
        case .deliverStoredAsFallback:
            if case .failure(let error) = transportResult { error.partialDownload?.discard() }
            prepared.observation?.cacheDidAnswer(.fallback)
            for monitor in eventMonitors { monitor.request(sent, didCompleteWith: transportResult) }
            prepared.logger.debug(
                "delivering a stored response in place of a failure",
                metadata: ["brick.cache.key": "\(exchange.key)"]
            )
            return storedOutcome(exchange, prepared: prepared, now: responseTime, stale: true, lifecycle: lifecycle)
        case .deliverNetwork(let store):
            prepared.observation?.cacheDidAnswer(.miss)
            if store, case .success(let response) = transportResult {
                storeIfAllowed(response, exchange: exchange, prepared: prepared, times: (requestTime, responseTime))
            }
        }
        return finish(prepared, request: sent, result: transportResult, lifecycle: lifecycle)
    }

    /// `request` with the validators of `stored`: `If-None-Match` with its `ETag`,
    /// `If-Modified-Since` with its `Last-Modified` (RFC 9111 §4.3.1).
    private static func conditional(_ request: TransportRequest, on stored: CachedResponse?) -> TransportRequest {
        guard let stored else { return request }
        var request = request
        if let tag = stored.facts.entityTag { request.headerFields[.ifNoneMatch] = tag }
        if let modified = stored.facts.lastModified { request.headerFields[.ifModifiedSince] = modified }
        return request
    }

    /// Stores the server's response when the rules allow it, replacing the variants that vary on
    /// other fields.
    private func storeIfAllowed(
        _ response: TransportResponse,
        exchange: CacheExchange,
        prepared: PreparedRequest,
        times: (request: Date, response: Date)
    ) {
        let fields = response.headerFields
        let request = exchange.request
        let varyNames = StoredResponseFacts.varyNames(in: fields)
        let storability = CacheRules.Storability(
            method: request.method,
            status: response.status.code,
            request: CacheControl(request.headerFields),
            response: CacheControl(fields),
            hasExpires: fields[.expires] != nil,
            isAuthorized: CredentialFields.present(in: request.headerFields) || prepared.authenticator != nil,
            storesAuthorized: exchange.caching.storesAuthorizedResponses,
            variesOnEverything: varyNames == nil,
            bodyInMemory: response.body != nil || request.method == .head
        )
        guard storability.isStorable, let varyNames else { return }
        // A response reached through redirects is the last hop's: it is stored under that hop's
        // URL, never under the one asked for, whose own answer (a redirect, usually not
        // storable) was not seen. What was stored for the URL asked for is out of date.
        let key = response.url.isEmpty ? exchange.key : CacheKey(method: request.method.rawValue, url: response.url)
        let redirected = key != exchange.key
        if redirected { forget(exchange.key, in: exchange.caching.cache) }
        let stored = CachedResponse(
            key: key,
            variant: CachedResponse.variant(names: varyNames, of: request.headerFields),
            status: response.status.code,
            headerFields: CacheRules.storedFields(fields),
            body: response.body ?? Data(),
            url: response.url.isEmpty ? request.urlString : response.url,
            requestTime: times.request,
            responseTime: times.response
        )
        // Variants that vary on other fields are replaced (all of them, for a redirect's target,
        // whose variants this exchange did not look up).
        if redirected || exchange.variants.contains(where: { $0.facts.varyNames != varyNames }) {
            forget(key, in: exchange.caching.cache)
        }
        keep(stored, in: exchange.caching.cache)
    }

    /// Revalidates a stale response in the background (`stale-while-revalidate`): one at a time
    /// per stored response, no retries, the result stored.
    private func revalidateInBackground(_ exchange: CacheExchange, prepared: PreparedRequest) {
        guard let stored = exchange.stored else { return }
        let token = "\(exchange.key)\n\(stored.variant)"
        guard backgroundRevalidations.withLock({ $0.insert(token).inserted }) else { return }
        var prepared = prepared
        prepared.retry = .none
        Task.detached { [self] in
            defer { _ = backgroundRevalidations.withLock { $0.remove(token) } }
            let lifecycle = RequestLifecycle()
            _ = lifecycle.begin()
            let sent = Self.conditional(exchange.request, on: stored)
            willStart(sent, prepared)
            let requestTime = Date()
            let result = await self.exchange(prepared, request: sent, lifecycle: lifecycle)
            let responseTime = Date()
            _ = lifecycle.complete()
            guard case .success(let transportResult) = result else { return }
            for monitor in eventMonitors { monitor.request(sent, didCompleteWith: transportResult) }
            guard case .success(let response) = transportResult else { return }
            if response.status.code == 304 {
                if stored.isSelected(byNotModified: response.headerFields) {
                    keep(
                        stored.refreshed(with: response.headerFields, requestTime: requestTime, responseTime: responseTime),
                        in: exchange.caching.cache
                    )
                } else {
                    // Out of date, and not refreshed: the next request goes to the server.
                    forget(exchange.key, in: exchange.caching.cache)
                }
            } else if !CacheRules.serverErrors.contains(response.status.code) {
                storeIfAllowed(response, exchange: exchange, prepared: prepared, times: (requestTime, responseTime))
            }
        }
    }

    /// After a successful unsafe request (`POST`, `PUT`, `PATCH`, `DELETE`, …), what is stored for
    /// its URL is out of date (RFC 9111 §4.4).
    private func invalidate(after outcome: Outcome, of request: TransportRequest, in cache: any ResponseCache) {
        guard request.method != .get, request.method != .head, request.method != .options, request.method != .trace
        else { return }
        let status: Int?
        switch outcome.ending {
        case .validated(let response): status = response.status.code
        case .failed(_, let response): status = response?.status.code
        }
        guard let status, (200..<400).contains(status) else { return }
        forget(CacheKey(method: "GET", url: request.urlString), in: cache)
        forget(CacheKey(method: "HEAD", url: request.urlString), in: cache)
    }

    /// Stores `response`; a failing store is logged, never the request's failure.
    private func keep(_ response: CachedResponse, in cache: any ResponseCache) {
        do throws(BrickError) {
            try cache.store(response)
        } catch {
            logger.warning("the response cache could not store", metadata: ["brick.cache.key": "\(response.key)", "error.message": "\(error)"])
        }
    }

    private func forget(_ key: CacheKey, in cache: any ResponseCache) {
        do throws(BrickError) {
            try cache.removeCachedResponses(for: key)
        } catch {
            logger.warning("the response cache could not remove", metadata: ["brick.cache.key": "\(key)", "error.message": "\(error)"])
        }
    }
}
