import FoundationEssentials
import Glibc

/// What a ``Transport`` is told: timeouts, connection limits, HTTP version, TLS, proxy,
/// redirects, response size and decompression.
///
/// A ``Session`` hands its ``Session/Configuration/transport`` to the transport it makes (the curl
/// transport, `CurlTransport.Configuration`, is this type); a transport of your own reads what it
/// can honour. The tuning knobs behind `@_spi(Tuning)` concern the curl transport's driver thread.
public struct TransportConfiguration: Sendable {
    /// Limit for establishing a connection (TCP and TLS). Default 30 s.
    public var connectTimeout: Duration = .seconds(30)
    /// Limit for a whole request, or `nil` for none (the default; the idle timeout still applies).
    public var requestTimeout: Duration? = nil
    /// A transfer that moves no byte, in either direction, for this long once its request is on
    /// its way fails with ``TransportError/Kind/timedOut`` (waiting for a connection does not
    /// count; ``connectTimeout`` covers connecting). Checked about four times per timeout, at
    /// least every second, so a transfer fails within a quarter more than this. Default 60 s;
    /// `nil` disables it.
    public var idleTimeout: Duration? = .seconds(60)
    /// How many bytes a transfer must move per ``idleTimeout`` not to count as idle. 1, the
    /// default: only a transfer that stopped is idle. A peer that trickles a byte a second keeps
    /// such a transfer alive for as long as it likes; with, say, 1,024 and a 30 s idle timeout,
    /// any 30 s in which less than 1 KiB moved fails the transfer (libcurl's low-speed limit,
    /// counted per window). Values below 1 count as 1.
    public var idleMinimumBytes: Int = 1
    /// Most connections open at once, in use or idle, or `nil` for no limit. Requests beyond
    /// it wait for a connection (they are queued, not failed). It also bounds the idle
    /// connections kept for reuse.
    ///
    /// Default: ``defaultMaxConnections``, 256 or fewer when the process may open fewer files
    /// (`ulimit -n`): half of what the limit leaves after 24 descriptors for the rest of the
    /// process, so a burst of requests cannot use up the process's file descriptors (every
    /// socket is one, and a process without descriptors fails in unrelated places).
    public var maxConnections: Int? = TransportConfiguration.defaultMaxConnections
    /// Most connections to one host (name and port) at once, or `nil` for no limit. Requests
    /// beyond it wait for a connection. Default 128.
    public var maxConnectionsPerHost: Int? = 128
    /// Which HTTP version to speak.
    public var httpVersion: HTTPVersionPreference = .http2OverTLS
    /// TLS settings. Verification of the server certificate and host name is always on.
    public var tls: TLSConfiguration = TLSConfiguration()
    /// Proxy settings; by default read once from the environment when the transport is created.
    public var proxy: ProxyConfiguration = .environment
    /// How redirects are followed.
    public var redirects: RedirectPolicy = RedirectPolicy()
    /// Whether the transport keeps the cookies servers set and sends them back, as a browser
    /// does (libcurl's cookie engine: domain, path, `Secure` and expiry rules), for APIs that
    /// keep a login in a session cookie. Cookies live in memory only, are shared by every
    /// request of this transport and by no other, and are never written to disk; see
    /// `CurlTransport.cookies()` and `CurlTransport.removeAllCookies()`. Default `false`:
    /// a `Set-Cookie` is ignored.
    public var storesCookies: Bool = false
    /// Host names that connect to given addresses instead of those DNS returns (libcurl's
    /// `CURLOPT_RESOLVE`): a staging server behind a production name, one backend behind a
    /// load balancer, a device without DNS. The URL, `Host` and TLS name stay the host's.
    /// Default none.
    public var hostOverrides: [HostOverride] = []
    /// A Unix domain socket every request is sent through instead of a TCP connection, such
    /// as `/var/run/docker.sock` or a local daemon's control socket; `nil` (the default) for
    /// TCP. The URL's host still names the server (`Host`, TLS) and its port is ignored;
    /// proxies do not apply. One transport talks to one socket: give each its own session.
    public var unixSocketPath: String? = nil
    /// Largest accepted *decoded* response body in bytes. Default 256 MiB.
    public var maxResponseSize: Int64 = 256 * 1024 * 1024
    /// Whether to ask for compressed responses (`Accept-Encoding`: gzip, deflate and, when this
    /// libcurl has them, br and zstd) and decode them. Default `true`.
    public var automaticDecompression: Bool = true
    /// The `User-Agent` sent when a request has none, or `nil` to send none.
    /// Default ``defaultUserAgent``, `BrickRequest/VERSION`. (Each header costs libcurl 7.88 several
    /// thousand instructions per request to format; see the benchmarks.)
    public var userAgent: String? = TransportConfiguration.defaultUserAgent
    /// How many idle easy handles are kept for reuse once no transfer is in flight. Default 64.
    /// While transfers run, every handle is kept for the next ones (so a burst of concurrent
    /// requests does not create and destroy handles); the surplus is freed when the last
    /// transfer ends. (For tests of handle reuse; the default serves every workload measured.)
    package var maxIdleHandles: Int = 64
    /// How long the driver thread stays awake for a follow-up request after it has handed
    /// completions to other threads and has nothing left in flight. Default `.zero` (off).
    ///
    /// Code that answers a response from another thread (a task resumed by `await` on the global
    /// executor, a handler on a `CallbackQueue.dispatch(_:)` queue) starts the next request
    /// while the driver may be asleep in `poll`, which costs a wakeup. Spinning briefly instead
    /// (CPU pause instructions, bounded by this duration) avoids it, but holds a core that the
    /// woken thread may need: with few cores it costs more than the wakeup it saves (the
    /// figures are in Benchmarks/README.md). Worth trying only with cores to spare;
    /// at most 1 s.
    ///
    /// Advanced: a tuning knob for benchmarks and machines with cores to spare.
    @_spi(Tuning) public var handOffSpin: Duration = .zero
    /// How long work run on the driver's thread may hold up its I/O before a standby thread
    /// takes the I/O over. Default 5 ms.
    ///
    /// A ``Session``'s handlers (on its default ``CallbackQueue/serial(label:)`` queue) and the
    /// tasks on `CurlTransport.taskExecutor` run on the driver's thread between rounds of I/O,
    /// which spares each response a thread hop. A standby thread looks every `stallLimit` while
    /// such work runs; a piece of work it finds running at two consecutive looks (so after
    /// between one and two limits) keeps its thread, and the standby carries on with the I/O as
    /// the new driver thread. Handlers may therefore block without stalling other requests for
    /// more than about two limits. The standby sleeps while there is no such work.
    ///
    /// Each look wakes a thread, so a shorter limit costs CPU while requests flow; the default
    /// costs no measurable amount (the figures are in Benchmarks/README.md).
    ///
    /// `.zero` turns this off: handlers then always hop to their queue's thread, and tasks on
    /// `taskExecutor` hold up the I/O for as long as they run. At least 100 µs otherwise; at most 10 s.
    @_spi(Tuning) public var stallLimit: Duration = .milliseconds(5)

    /// Whether a task awaiting a response — a ``Session``'s (`value`, `response()`) or
    /// ``Transport/send(_:)``'s — goes on on the driver's thread, at its safe point, until it
    /// next suspends. **Opt-in**, default `false`: it installs a process-wide runtime hook.
    ///
    /// Such a task is otherwise resumed on the global concurrent executor: a pool thread
    /// woken for each response, and the driver woken again from `poll` by the request the task
    /// sends next. Run at the safe point instead, the task's code after `await` is treated like
    /// a `response(_:)` handler on the default queue: watched by the standby thread
    /// (`stallLimit`), so blocking or long computations move the I/O to another thread
    /// rather than stall it, and the next request it sends needs no wakeup.
    ///
    /// **What it changes for the whole process.** The catch goes through the Swift runtime's
    /// `swift_task_enqueueGlobal_hook`, one slot per process. The first transport made with
    /// `true` stores a hook there with a compare-and-exchange, only if the slot is empty, and
    /// it stays for the life of the process; enqueues it does not catch (every one not made
    /// by a driver resuming its own tasks) go straight to the runtime. A hook installed
    /// before (SwiftNIO's `singletonConcurrencyExecutor` takeover, a test helper such as
    /// `withMainSerialExecutor`) is never replaced or bypassed: the option then does nothing
    /// (`capturesResumedTasks` says so). Conversely, a library that installs
    /// its hook later with compare-and-exchange finds the slot taken, and helpers that read
    /// "a hook is installed" as their own mode being on are misled. It is installed only by
    /// the toolchains it was tested with (Swift 6.3); elsewhere the option does nothing.
    ///
    /// Without it, the same gain with no hook: run the awaiting code on
    /// `CurlTransport.taskExecutor` (`Task(executorPreference:)`,
    /// `withTaskExecutorPreference`).
    ///
    /// Only tasks bound for the global executor are concerned: a task isolated to an actor
    /// (`@MainActor`) or preferring a task executor resumes there as always. With
    /// `stallLimit` `.zero` the option does nothing.
    @_spi(Tuning) public var resumesTasksAtSafePoint: Bool = false

    /// Creates the default configuration.
    public init() {}

    /// The default ``userAgent``: `BrickRequest/VERSION`.
    public static let defaultUserAgent = "BrickRequest/\(BrickRequestVersion.string)"

    /// The default ``maxConnections``: `min(256, (n - 24) / 2)` for the process's soft limit
    /// of open files `n` (`RLIMIT_NOFILE`, read once), and at least 2: 256 under the usual
    /// limit of 1,024, 20 under `ulimit -n 64`.
    public static let defaultMaxConnections: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else {
            return 256
        }
        return ConnectionLimits.defaultTotal(openFileLimit: UInt64(limit.rlim_cur))
    }()

    /// The HTTP version a transport negotiates.
    public enum HTTPVersionPreference: Sendable, Hashable {
        /// HTTP/1.1 only.
        case http1_1
        /// HTTP/2 over TLS when the server offers it through ALPN, HTTP/1.1 otherwise (the default).
        case http2OverTLS
    }

    /// TLS settings. There is no switch to turn certificate verification off: trust a private CA
    /// with ``caFile`` instead.
    public struct TLSConfiguration: Sendable, Hashable {
        /// A PEM file of CA certificates to trust instead of the system bundle.
        public var caFile: String? = nil
        /// A directory of hashed CA certificates to trust instead of the system store.
        public var caPath: String? = nil
        /// A client certificate for mutual TLS.
        public var clientCertificate: ClientCertificate? = nil
        /// Public-key pins, each `sha256//BASE64` of a SubjectPublicKeyInfo. When non-empty, the
        /// server's key must match one of them *in addition to* normal verification.
        public var pinnedPublicKeys: [String] = []

        /// Creates TLS settings with verification against the system trust store.
        public init() {}
    }

    /// A client certificate and its private key, both PEM files.
    public struct ClientCertificate: Sendable, Hashable {
        /// Path of the PEM certificate (chain).
        public var certificatePath: String
        /// Path of the PEM private key.
        public var privateKeyPath: String
        /// Passphrase of the private key, if it is encrypted.
        public var privateKeyPassword: String?

        /// Creates a client certificate reference.
        ///
        /// - Parameters:
        ///   - certificatePath: Path of the PEM certificate.
        ///   - privateKeyPath: Path of the PEM private key.
        ///   - privateKeyPassword: Passphrase of the key, if any.
        public init(certificatePath: String, privateKeyPath: String, privateKeyPassword: String? = nil) {
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
            self.privateKeyPassword = privateKeyPassword
        }
    }

    /// Where requests go through a proxy.
    public enum ProxyConfiguration: Sendable, Hashable {
        /// No proxy, whatever the environment says.
        case none
        /// `http_proxy`, `https_proxy` (or `HTTPS_PROXY`), `all_proxy` and `no_proxy`, read once
        /// when the transport is created. (Upper-case `HTTP_PROXY` is ignored, as curl does.)
        case environment
        /// One proxy for every request, except hosts matched by `noProxy` (curl's `NOPROXY` syntax).
        case url(String, noProxy: String = "")
    }

    /// A host name and port that connect to given IP addresses instead of those DNS returns.
    public struct HostOverride: Sendable, Hashable {
        /// The host name, as written in URLs.
        public let host: String
        /// The port the override applies to.
        public let port: Int
        /// The IPv4 or IPv6 addresses to connect to, in order.
        public let addresses: [String]

        /// Creates an override.
        ///
        /// - Parameters:
        ///   - host: A host name (no port, no brackets, no spaces or control characters).
        ///   - port: The port, 1–65535.
        ///   - addresses: One or more IPv4 (`192.0.2.10`) or IPv6 (`2001:db8::10`) addresses.
        /// - Throws: ``TransportError/Kind/invalidRequest`` naming what is wrong.
        public init(host: String, port: Int, addresses: [String]) throws(TransportError) {
            let forbidden = host.unicodeScalars.contains { $0.value <= 0x20 || $0 == ":" || $0 == "," || $0 == "[" }
            guard !host.isEmpty, !forbidden else {
                throw TransportError(.invalidRequest, message: "host override: \"\(host)\" is not a host name")
            }
            guard (1...65_535).contains(port) else {
                throw TransportError(.invalidRequest, message: "host override: port \(port) is out of range")
            }
            guard !addresses.isEmpty else {
                throw TransportError(.invalidRequest, message: "host override: \(host) has no address")
            }
            for address in addresses where !Self.isIPAddress(address) {
                throw TransportError(.invalidRequest, message: "host override: \"\(address)\" is not an IP address")
            }
            self.host = host
            self.port = port
            self.addresses = addresses
        }


        private static func isIPAddress(_ text: String) -> Bool {
            var buffer = in6_addr()
            return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
        }
    }

    /// How redirects (301, 302, 303, 307, 308 with a `Location`) are followed.
    ///
    /// BrickRequest follows redirects itself rather than through libcurl, so that each hop is
    /// checked: only `http` and `https`, never `https` to `http` unless allowed, and `Authorization`,
    /// `Cookie` and `Proxy-Authorization` — and every field named in ``sensitiveHeaders`` (an
    /// `X-Api-Key`) — removed as soon as the origin (scheme, host or port) changes, for the rest
    /// of the chain. 303 (and 301/302 after `POST`) switch to `GET` without a body.
    public struct RedirectPolicy: Sendable, Hashable {
        /// Most redirects followed for one request; more fail with ``TransportError/Kind/tooManyRedirects``. Default 10.
        public var maxRedirects: Int = 10
        /// Whether a redirect from `https` to `http` is followed. Default `false` (refused).
        public var allowsHTTPSToHTTP: Bool = false
        /// Header names that carry credentials besides `Authorization`, `Cookie` and
        /// `Proxy-Authorization`: dropped with them on a redirect that leaves the origin. A
        /// session adds its ``Session/Configuration/sensitiveHeaders``. Default none.
        public var sensitiveHeaders: Set<String> = []

        /// Creates a redirect policy.
        ///
        /// - Parameters:
        ///   - maxRedirects: Most redirects per request; 0 disables following.
        ///   - allowsHTTPSToHTTP: Whether to follow a downgrade to plain HTTP.
        ///   - sensitiveHeaders: More credential header names to drop when a redirect leaves the origin.
        public init(maxRedirects: Int = 10, allowsHTTPSToHTTP: Bool = false, sensitiveHeaders: Set<String> = []) {
            self.maxRedirects = maxRedirects
            self.allowsHTTPSToHTTP = allowsHTTPSToHTTP
            self.sensitiveHeaders = sensitiveHeaders
        }

        /// The field names ``sensitiveHeaders`` holds (those that are valid names).
        package var sensitiveFieldNames: [HTTPField.Name] {
            sensitiveHeaders.compactMap { HTTPField.Name($0) }
        }
    }
}
