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
/// without one, only requests whose `Host` is in `allowedHosts` are served — by default the
/// loopback names only, so a page a DNS-rebinding attacker points at the console is refused
/// (`421`). Every change is a `POST` carrying a CSRF token bound to the browser (a random
/// HttpOnly, SameSite=Strict cookie the form must echo; a `POST` without it is answered `403`);
/// the message a change reports is the console's own (an opaque, one-time reference in the URL,
/// never text from it); every stored string is HTML-escaped; credentials are never stored, so
/// never shown. Queue names travel percent-encoded in paths and are decoded once: a queue named
/// `café`, `ops/eu west?x=1#f` or `q'<b>` is shown and changed as itself.
public struct QueueConsole: Sendable {
    /// The store the console reads and changes.
    public let store: any InspectableOfflineStore
    let token: String?
    let basePath: String
    let allowedHosts: Set<String>
    let pageSize: Int
    private let sessions: Sessions
    let flashes: Flashes

    /// A console of `store`.
    ///
    /// - Parameters:
    ///   - store: The store.
    ///   - token: The secret every request must carry; `nil` for none (bind to loopback then).
    ///   - basePath: Where the routes are mounted (`""` at the root), for links and forms.
    ///   - allowedHosts: The host names a request's `Host` may name when there is no token (any
    ///     port). Default, and for `nil`: the loopback names `127.0.0.1`, `localhost` and `[::1]`.
    ///     A console reached by another name without a token must list it here (and is then
    ///     reachable by anyone who can reach that name: prefer a token).
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
        self.allowedHosts = Set((allowedHosts ?? Self.loopbackHosts).map { $0.lowercased() })
        self.pageSize = max(1, pageSize)
        self.sessions = Sessions()
        self.flashes = Flashes()
    }

    /// The names a console without a token answers by default.
    static let loopbackHosts: Set<String> = ["127.0.0.1", "localhost", "[::1]"]

    /// The CSRF token of the request being answered (the browser's own, from its cookie, or a
    /// new one the response sets): what the forms of the page carry.
    @TaskLocal static var csrf = ""

    /// The console's routes, to add to a router (`router.addRoutes(console.routes(), atPath: …)`).
    public func routes<Context: RequestContext>(context: Context.Type = BasicRequestContext.self) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        routes.add(middleware: Guard(console: self))
        routes.get("/") { request, _ in try await overview(request) }
        routes.head("/") { _, _ in Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"]) }
        routes.get("/events") { _, _ in events() }
        routes.get("/login") { _, _ in loginPage(failed: false) }
        routes.post("/login") { request, _ in try await login(request) }
        routes.get("/queues/:queue") { request, context in
            try await queuePage(Self.queue(in: context), request: request)
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
            try await setPaused(true, Self.queue(in: context), request)
        }
        routes.post("/queues/:queue/resume") { request, context in
            try await setPaused(false, Self.queue(in: context), request)
        }
        routes.post("/queues/:queue/dead/retry") { request, context in
            try await bulk(retrying: true, Self.queue(in: context), request)
        }
        routes.post("/queues/:queue/dead/purge") { request, context in
            try await bulk(retrying: false, Self.queue(in: context), request)
        }
        return routes
    }

    /// The queue a path names: its segment percent-decoded once (links encode every byte but
    /// letters, digits and `-._~`, so `/` and `%` in a name survive the router).
    static func queue<Context: RequestContext>(in context: Context) throws -> String {
        let segment = try context.parameters.require("queue")
        guard let name = segment.removingPercentEncoding else {
            throw HTTPError(.badRequest, message: "the queue's name in the path is not percent-encoded UTF-8")
        }
        return name
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
            } else {
                let allowed = console.allowedHosts
                guard let authority = request.head.authority, allowed.contains(Self.hostName(authority)) else {
                    return console.text(.misdirectedRequest, "421: this console answers only as \(allowed.sorted().joined(separator: " or ")) (give it a token, or list the name in allowedHosts)")
                }
            }
            // Double-submit: the form must echo the browser's own CSRF cookie (another site can
            // neither read it nor, SameSite=Strict, have it sent).
            let cookie = request.cookies["brick_csrf"]?.value.filter(\.isHexDigit)
            if request.method == .post {
                let form = try await Form.read(&request)
                guard let cookie, cookie.count == 64, let sent = form["csrf"], Self.equal(sent, cookie) else {
                    return console.text(.forbidden, "403: a change needs the console's CSRF token: use the console's own forms (cookies on)")
                }
            }
            let csrf = cookie.flatMap { $0.count == 64 ? $0 : nil } ?? QueueConsole.randomHex(32)
            var response = try await QueueConsole.$csrf.withValue(csrf) { try await next(request, context) }
            if cookie != csrf {
                let path = console.basePath.isEmpty ? "/" : console.basePath
                response.headers.append(HTTPField(name: .setCookie, value: "brick_csrf=\(csrf); Path=\(path); HttpOnly; SameSite=Strict"))
            }
            response.headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
            return response
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
