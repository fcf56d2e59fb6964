public import BrickOfflineCore
import BrickRequest
import Foundation
public import Hummingbird
import Synchronization

/// The web console of an offline store's queues: each queue's depth and oldest age, its
/// deliveries and failures per minute over the last hour (live), its pending entries and dead
/// letters paged, one entry's stored fields, and the operator's changes — retry, remove, pause,
/// resume, bulk retry and purge of a dead-reason group.
///
/// `brick-queue serve` runs it on its own; a service mounts the routes on its own Hummingbird
/// server, under a path of its choice:
///
/// ```swift
/// let console = QueueConsole(store: store, token: adminToken, basePath: "/admin/queues")
/// router.addRoutes(console.routes(), atPath: "/admin/queues")
/// ```
///
/// Safe by default: with a `token`, every request must carry it (`Authorization: Bearer TOKEN`,
/// or the HttpOnly, SameSite=Strict session cookie the login form sets, good for 12 hours) or is
/// answered `401`;
/// without one, only requests whose `Host` is in `allowedHosts` are served (a loopback console
/// then refuses a page a DNS-rebinding attacker points at it). Every change is a `POST` carrying
/// the console's CSRF token (a `POST` without it is answered `403`); every stored string is
/// HTML-escaped; credentials are never stored, so never shown.
public struct QueueConsole: Sendable {
    /// The store the console reads and changes.
    public let store: any InspectableOfflineStore
    let token: String?
    let basePath: String
    let allowedHosts: Set<String>?
    let pageSize: Int
    let csrf: String
    private let sessions: Sessions

    /// A console of `store`.
    ///
    /// - Parameters:
    ///   - store: The store.
    ///   - token: The secret every request must carry; `nil` for none (bind to loopback then).
    ///   - basePath: Where the routes are mounted (`""` at the root), for links and forms.
    ///   - allowedHosts: The host names a request's `Host` may name when there is no token
    ///     (`127.0.0.1`, `localhost`, `[::1]`; any port); `nil` serves any.
    ///   - pageSize: Entries per page. Default 50.
    public init(
        store: any InspectableOfflineStore,
        token: String? = nil,
        basePath: String = "",
        allowedHosts: Set<String>? = nil,
        pageSize: Int = 50
    ) {
        self.store = store
        self.token = token.flatMap { $0.isEmpty ? nil : $0 }
        self.basePath = basePath.hasSuffix("/") ? String(basePath.dropLast()) : basePath
        self.allowedHosts = allowedHosts
        self.pageSize = max(1, pageSize)
        self.csrf = Self.randomHex(32)
        self.sessions = Sessions()
    }

    /// The console's routes, to add to a router (`router.addRoutes(console.routes(), atPath: …)`).
    public func routes<Context: RequestContext>(context: Context.Type = BasicRequestContext.self) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.add(middleware: Guard(console: self))
        routes.get("/") { request, _ in try await overview(request) }
        routes.get("/events") { _, _ in events() }
        routes.get("/login") { _, _ in loginPage(failed: false) }
        routes.post("/login") { request, _ in try await login(request) }
        routes.get("/queues/:queue") { request, context in
            try await queuePage(context.parameters.require("queue"), request: request)
        }
        routes.get("/entries/:id") { request, context in
            try await entryPage(context.parameters.require("id", as: UUID.self), request: request)
        }
        routes.post("/entries/:id/retry") { request, context in
            try await retry(context.parameters.require("id", as: UUID.self), request)
        }
        routes.post("/entries/:id/remove") { request, context in
            try await remove(context.parameters.require("id", as: UUID.self), request)
        }
        routes.post("/queues/:queue/pause") { request, context in
            try await setPaused(true, context.parameters.require("queue"), request)
        }
        routes.post("/queues/:queue/resume") { request, context in
            try await setPaused(false, context.parameters.require("queue"), request)
        }
        routes.post("/queues/:queue/dead/retry") { request, context in
            try await bulk(retrying: true, context.parameters.require("queue"), request)
        }
        routes.post("/queues/:queue/dead/purge") { request, context in
            try await bulk(retrying: false, context.parameters.require("queue"), request)
        }
        return routes
    }

    // MARK: - Access

    /// Refuses what the console must not serve: a foreign `Host` without a token, a request
    /// without the token, a `POST` without the CSRF token.
    struct Guard<Context: RequestContext>: RouterMiddleware {
        let console: QueueConsole

        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            var request = request
            let path = request.uri.path.dropFirst(console.basePath.count)
            if let token = console.token {
                let bearer = request.headers[.authorization].map { Self.equal($0, "Bearer " + token) } ?? false
                let session = request.cookies["brick_console"].map { console.sessions.contains($0.value) } ?? false
                if !bearer && !session && path != "/login" {
                    if request.method == .get && request.headers[.accept]?.contains("text/html") == true {
                        return Response(status: .seeOther, headers: [.location: console.basePath + "/login"])
                    }
                    return console.text(.unauthorized, "401: this console needs its token (Authorization: Bearer, or log in at \(console.basePath)/login)")
                }
            } else if let allowed = console.allowedHosts {
                guard let authority = request.head.authority, allowed.contains(Self.hostName(authority)) else {
                    return console.text(.misdirectedRequest, "421: this console answers only as \(allowed.sorted().joined(separator: " or "))")
                }
            }
            if request.method == .post {
                let form = try await Form.read(&request)
                guard let sent = form["csrf"], Self.equal(sent, console.csrf) else {
                    return console.text(.forbidden, "403: a change needs the console's CSRF token: use the console's own forms")
                }
            }
            return try await next(request, context)
        }

        /// `host` of `host:port` (`[::1]` of `[::1]:8080`), lowercased.
        static func hostName(_ authority: String) -> String {
            let lowered = authority.lowercased()
            if lowered.hasPrefix("["), let close = lowered.firstIndex(of: "]") { return String(lowered[...close]) }
            return String(lowered.prefix { $0 != ":" })
        }

        /// Compares without an early exit (the time taken says nothing of where they differ).
        static func equal(_ a: String, _ b: String) -> Bool {
            let (x, y) = (Array(a.utf8), Array(b.utf8))
            guard x.count == y.count else { return false }
            var difference: UInt8 = 0
            for index in x.indices { difference |= x[index] ^ y[index] }
            return difference == 0
        }
    }

    /// The console's login sessions: random IDs, in memory (a restart logs everyone out), each
    /// good for ``lifetime`` after the login.
    final class Sessions: Sendable {
        static let lifetime: TimeInterval = 12 * 3600
        private let expiries = Mutex([String: Date]())

        func contains(_ id: String) -> Bool {
            let now = Date()
            return expiries.withLock { expiries in
                guard let expiry = expiries[id] else { return false }
                if expiry > now { return true }
                expiries[id] = nil
                return false
            }
        }

        func make() -> String {
            let id = QueueConsole.randomHex(32)
            let now = Date()
            expiries.withLock { expiries in
                expiries = expiries.filter { $0.value > now }  // forgets the expired
                expiries[id] = now.addingTimeInterval(Self.lifetime)
            }
            return id
        }
    }

    static func randomHex(_ count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    func loginPage(failed: Bool) -> Response {
        html(
            "Log in",
            """
            <h1>Log in</h1>\(failed ? "<p class=\"dead\">That is not the console's token.</p>" : "")
            <form method="post" action="\(HTML.escape(basePath))/login">\(csrfField)
            <label>Token <input type="password" name="token" autocomplete="off" autofocus></label>
            <button class="primary" type="submit">Log in</button></form>
            """,
            status: failed ? .unauthorized : .ok
        )
    }

    func login(_ request: Request) async throws -> Response {
        var request = request
        let form = try await Form.read(&request)
        guard let token, let given = form["token"], Guard<BasicRequestContext>.equal(given, token) else {
            return loginPage(failed: true)
        }
        let path = basePath.isEmpty ? "/" : basePath
        return Response(
            status: .seeOther,
            headers: [
                .location: basePath + "/",
                .setCookie: "brick_console=\(sessions.make()); Path=\(path); Max-Age=\(Int(Sessions.lifetime)); HttpOnly; SameSite=Strict",
            ]
        )
    }
}
