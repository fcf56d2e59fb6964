import Synchronization

/// Task-scoped replacement of a session: how a test points endpoints whose session comes from a
/// brick (`var session: Session { .api }`) at a stub.
extension Session {
    /// A replacement in force: the session, and whether endpoints keep caches of their own.
    private struct Replacement: Sendable {
        let session: Session
        let keepsEndpointCaches: Bool
    }

    /// Replacements in force in the current task: a session's identity → its replacement.
    @TaskLocal private static var replacements: [ObjectIdentifier: Replacement] = [:]

    /// How many `withReplacement` scopes are open in the process: while none is, requests skip
    /// reading the task-local table (the common case costs one relaxed atomic load).
    private static let openReplacementScopes = Atomic<Int>(0)

    /// Runs `operation` with every request whose ``RequestType/session`` is this session running on
    /// `replacement` instead: requests started inside the closure, in its child tasks, in tasks it
    /// creates with `Task { }` (which inherit task-locals), by `resume()` as well as by `response()`
    /// and `value`. Other sessions are untouched, and other tasks — tests running in parallel — do
    /// not see the replacement. Scopes nest; the innermost replacement of a session wins.
    ///
    /// Caching endpoints (``CachedResponseType``) use the replacement's
    /// ``Configuration/responseCache`` in the scope, even one that names a cache of its own (a
    /// `SQLiteResponseCache` on disk): a stubbed response must not become what the app later
    /// serves offline. Pass `keepingEndpointCaches: true` to test an endpoint's own cache.
    ///
    /// ```swift
    /// @Test func showsTheUser() async throws {
    ///     let stub = StubTransport()
    ///     stub.stub(.get, "/users", .json(#"{"name":"Ada"}"#))
    ///     try await Session.api.withReplacement(.testing(stub)) {
    ///         let user = try await GetUser(userID: "100").value
    ///         #expect(user["name"].string == "Ada")
    ///     }
    /// }
    /// ```
    ///
    /// (Swift infers whether a closure throws from the `try`s it can see; one inside `#expect(…)`
    /// is not seen, so await the value before the expectation, as above.)
    ///
    /// A request started from outside any task (a Dispatch queue's thread, a C callback) sees no
    /// replacement; neither does a `Task.detached`.
    ///
    /// - Parameters:
    ///   - replacement: The session to run this session's requests on.
    ///   - keepingEndpointCaches: Whether endpoints that name a cache of their own keep using it.
    ///     Default `false`: every caching endpoint uses the replacement's cache.
    ///   - operation: The code to run.
    /// - Returns: What `operation` returns.
    @discardableResult
    public func withReplacement<Result>(
        _ replacement: Session,
        keepingEndpointCaches: Bool = false,
        isolation: isolated (any Actor)? = #isolation,
        operation: () async throws -> Result
    ) async rethrows -> Result {
        Self.openReplacementScopes.add(1, ordering: .relaxed)
        defer { Self.openReplacementScopes.subtract(1, ordering: .relaxed) }
        var table = Self.replacements
        table[ObjectIdentifier(self)] = Replacement(session: replacement, keepsEndpointCaches: keepingEndpointCaches)
        return try await Self.$replacements.withValue(table, operation: operation, isolation: isolation)
    }

    /// ``withReplacement(_:keepingEndpointCaches:isolation:operation:)`` for synchronous code.
    ///
    /// - Parameters:
    ///   - replacement: The session to run this session's requests on.
    ///   - keepingEndpointCaches: Whether endpoints that name a cache of their own keep using it.
    ///   - operation: The code to run.
    /// - Returns: What `operation` returns.
    @discardableResult
    public func withReplacement<Result>(
        _ replacement: Session,
        keepingEndpointCaches: Bool = false,
        operation: () throws -> Result
    ) rethrows -> Result {
        Self.openReplacementScopes.add(1, ordering: .relaxed)
        defer { Self.openReplacementScopes.subtract(1, ordering: .relaxed) }
        var table = Self.replacements
        table[ObjectIdentifier(self)] = Replacement(session: replacement, keepsEndpointCaches: keepingEndpointCaches)
        return try Self.$replacements.withValue(table, operation: operation)
    }

    /// The session that runs this session's requests in the current task: its replacement, if a
    /// ``withReplacement(_:keepingEndpointCaches:isolation:operation:)`` scope of this task names
    /// one; otherwise itself.
    @usableFromInline
    var resolved: Session { resolvedWithCaches.session }

    /// ``resolved``, and the cache every caching endpoint must use instead of its own (the
    /// replacement's, unless the scope keeps endpoint caches).
    var resolvedWithCaches: (session: Session, imposedCache: (any ResponseCache)?) {
        guard Self.openReplacementScopes.load(ordering: .relaxed) > 0,
            let replacement = Self.replacements[ObjectIdentifier(self)]
        else { return (self, nil) }
        let session = replacement.session
        return (session, replacement.keepsEndpointCaches ? nil : session.configuration.responseCache)
    }
}
