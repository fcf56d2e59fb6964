import FoundationEssentials
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

extension CurlTransport {
    /// Settings of a ``CurlTransport``: the ``TransportConfiguration`` every transport is told.
    ///
    /// Every limit is set explicitly on each transfer: Debian's libcurl 7.88 has no redirect limit
    /// of its own and does not stop a chunked body at `CURLOPT_MAXFILESIZE`.
    public typealias Configuration = TransportConfiguration
    /// The HTTP version a transport negotiates (``TransportConfiguration/HTTPVersionPreference``).
    public typealias HTTPVersionPreference = TransportConfiguration.HTTPVersionPreference
    /// TLS settings (``TransportConfiguration/TLSConfiguration``).
    public typealias TLSConfiguration = TransportConfiguration.TLSConfiguration
    /// A client certificate (``TransportConfiguration/ClientCertificate``).
    public typealias ClientCertificate = TransportConfiguration.ClientCertificate
    /// Proxy settings (``TransportConfiguration/ProxyConfiguration``).
    public typealias ProxyConfiguration = TransportConfiguration.ProxyConfiguration
    /// A host name that connects to given addresses (``TransportConfiguration/HostOverride``).
    public typealias HostOverride = TransportConfiguration.HostOverride
    /// How redirects are followed (``TransportConfiguration/RedirectPolicy``).
    public typealias RedirectPolicy = TransportConfiguration.RedirectPolicy
}

extension TransportConfiguration.HostOverride {
    /// libcurl's `HOST:PORT:ADDRESS[,ADDRESS]`, IPv6 addresses in brackets.
    var resolveEntry: String {
        let list = addresses.map { $0.contains(":") ? "[\($0)]" : $0 }.joined(separator: ",")
        return "\(host):\(port):\(list)"
    }
}

/// The proxy settings resolved once per transport (libcurl would otherwise read the environment on
/// every transfer).
struct ResolvedProxy: Sendable {
    var http: String
    var https: String
    var noProxy: String

    init(_ configuration: CurlTransport.ProxyConfiguration, environment: [String: String]) {
        switch configuration {
        case .none:
            self.http = ""
            self.https = ""
            self.noProxy = ""
        case .url(let url, let noProxy):
            self.http = url
            self.https = url
            self.noProxy = noProxy
        case .environment:
            let all = environment["all_proxy"] ?? environment["ALL_PROXY"] ?? ""
            self.http = environment["http_proxy"] ?? all
            self.https = environment["https_proxy"] ?? environment["HTTPS_PROXY"] ?? all
            self.noProxy = environment["no_proxy"] ?? environment["NO_PROXY"] ?? ""
        }
    }

    /// Whether any request of this scheme may go through a proxy (``proxy(forHost:secure:)`` then
    /// says whether this one does).
    func mayProxy(secure: Bool) -> Bool { !(secure ? https : http).isEmpty }

    /// The proxy a request to `host` goes through, or `nil`: `noProxy` read as libcurl does for
    /// names (`*`, or a comma-separated list of names each matching itself and its subdomains).
    /// An address range in `noProxy` is not matched here: such a host counts as proxied, which
    /// errs on the side of refusing under an egress policy.
    func proxy(forHost host: String, secure: Bool) -> String? {
        let url = secure ? https : http
        guard !url.isEmpty else { return nil }
        let name = host.lowercased()
        for entry in noProxy.split(separator: ",") {
            var entry = entry.trimmingPrefix(" ").lowercased()
            while entry.hasSuffix(" ") { entry.removeLast() }
            if entry == "*" { return nil }
            if entry.hasPrefix(".") { entry.removeFirst() }
            if !entry.isEmpty, name == entry || name.hasSuffix("." + entry) { return nil }
        }
        return url
    }
}
