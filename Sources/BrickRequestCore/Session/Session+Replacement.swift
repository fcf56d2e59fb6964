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

    /// How many `withReplacement` and `withEverySessionTransport` scopes are open in the process:
    /// while none is, requests skip reading the task-locals (the common case costs one relaxed
    /// atomic load).
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

    /// Runs `operation` with every session's requests in this task sent through the transport
    /// `makeTransport` returns for it: how a recording or a replay (`BrickTesting`'s `.replay`
    /// trait, `BrickHAR`'s `RecordingTransport` and `ReplayTransport`) takes every session of a
    /// test at once, without naming them. `makeTransport` is called once per session that runs a
    /// request in the scope, with that session's own transport (to wrap, or to ignore); the
    /// requests run on a session of the scope's own with the session's configuration,
    /// reachability, clock, logger, event monitors and instruments, a fresh in-memory response
    /// cache (a replayed answer never becomes what the app serves later, nor another test's) and
    /// traffic state of its own.
    ///
    /// Which requests, and which not, as for ``withReplacement(_:keepingEndpointCaches:isolation:operation:)``:
    /// those started in the scope's task, its child tasks and the `Task { }`s they create. A
    /// session that has a replacement of its own in the task keeps it: the more specific scope
    /// wins. Scopes nest; the innermost wins.
    ///
    /// - Parameters:
    ///   - makeTransport: The transport for a session, given its own.
    ///   - operation: The code to run.
    /// - Returns: What `operation` returns.
    @discardableResult
    public static func withEverySessionTransport<Result>(
        _ makeTransport: @escaping @Sendable (_ original: any Transport) -> any Transport,
        isolation: isolated (any Actor)? = #isolation,
        operation: () async throws -> Result
    ) async rethrows -> Result {
        try await withEverySessionTransport(forSession: { makeTransport($0.transport) }, isolation: isolation, operation: operation)
    }

    /// ``withEverySessionTransport(_:isolation:operation:)`` with the whole session given to
    /// `makeTransport` (its configuration's `sensitiveHeaders`, say), not only its transport.
    package static func withEverySessionTransport<Result>(
        forSession makeTransport: @escaping @Sendable (_ original: Session) -> any Transport,
        isolation: isolated (any Actor)? = #isolation,
        operation: () async throws -> Result
    ) async rethrows -> Result {
        openReplacementScopes.add(1, ordering: .relaxed)
        defer { openReplacementScopes.subtract(1, ordering: .relaxed) }
        return try await $everySession.withValue(
            EverySessionScope(makeTransport),
            operation: operation,
            isolation: isolation
        )
    }

    /// The scope of ``withEverySessionTransport(_:isolation:operation:)`` in force, if any.
    @TaskLocal private static var everySession: EverySessionScope?

    /// One ``withEverySessionTransport(_:isolation:operation:)`` scope: the session it made for
    /// each session that ran a request in it.
    private final class EverySessionScope: Sendable {
        let makeTransport: @Sendable (Session) -> any Transport
        /// By the original's identity; the original is kept too, so an identity is never reused
        /// while the scope lives.
        private let sessions = Lock([ObjectIdentifier: (original: Session, scoped: Session)]())

        init(_ makeTransport: @escaping @Sendable (Session) -> any Transport) {
            self.makeTransport = makeTransport
        }

        func session(for original: Session) -> Session {
            if let made = sessions.withLock({ $0[ObjectIdentifier(original)]?.scoped }) { return made }
            // Made outside the lock (a transport's init may do real work); the first one kept wins.
            let made = original.withTransport(makeTransport(original))
            return sessions.withLock { sessions in
                if let existing = sessions[ObjectIdentifier(original)] { return existing.scoped }
                sessions[ObjectIdentifier(original)] = (original, made)
                return made
            }
        }
    }

    /// A session like this one on `transport`, with a new in-memory response cache and traffic
    /// state of its own.
    private func withTransport(_ transport: any Transport) -> Session {
        var configuration = self.configuration
        configuration.responseCache = InMemoryResponseCache()
        return Session(
            configuration: configuration,
            transport: transport,
            reachability: reachability,
            sessionClock: clock,
            logger: logger,
            eventMonitors: eventMonitors,
            instruments: instruments
        )
    }

    /// The session that runs this session's requests in the current task: its replacement, if a
    /// ``withReplacement(_:keepingEndpointCaches:isolation:operation:)`` scope of this task names
    /// one; otherwise itself.
    @usableFromInline
    var resolved: Session { resolvedWithCaches.session }

    /// ``resolved``, and the cache every caching endpoint must use instead of its own (the
    /// replacement's, unless the scope keeps endpoint caches).
    var resolvedWithCaches: (session: Session, imposedCache: (any ResponseCache)?) {
        guard Self.openReplacementScopes.load(ordering: .relaxed) > 0 else { return (self, nil) }
        if let replacement = Self.replacements[ObjectIdentifier(self)] {
            let session = replacement.session
            return (session, replacement.keepsEndpointCaches ? nil : session.configuration.responseCache)
        }
        guard let scope = Self.everySession else { return (self, nil) }
        let session = scope.session(for: self)
        return (session, session.configuration.responseCache)
    }
}
