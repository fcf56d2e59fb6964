import FoundationEssentials
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

extension CurlTransport {
    /// A cookie held by a transport with `Configuration.storesCookies`.
    public struct Cookie: Sendable, Hashable {
        /// The cookie's name.
        public var name: String
        /// Its value.
        public var value: String
        /// The host it was set by or for (without a leading dot).
        public var domain: String
        /// Whether it is also sent to subdomains of ``domain`` (it had a `Domain` attribute).
        public var includesSubdomains: Bool
        /// The path prefix of the URLs it is sent to.
        public var path: String
        /// Whether it is sent over HTTPS only (`Secure`).
        public var isSecure: Bool
        /// Whether scripts may not read it (`HttpOnly`); meaningful to browsers only.
        public var isHTTPOnly: Bool
        /// When it expires, or `nil` for a session cookie (kept until the transport goes away).
        public var expires: Date?

        /// Parses one line of libcurl's Netscape cookie format:
        /// `[#HttpOnly_]domain TAB subdomains TAB path TAB secure TAB expiry TAB name TAB value`.
        init?(netscapeLine line: String) {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count >= 7, let expiry = Int64(fields[4]) else { return nil }
            var domain = fields[0]
            isHTTPOnly = domain.hasPrefix("#HttpOnly_")
            if isHTTPOnly { domain.removeFirst("#HttpOnly_".count) }
            if domain.hasPrefix(".") { domain.removeFirst() }
            self.domain = domain
            includesSubdomains = fields[1] == "TRUE"
            path = fields[2]
            isSecure = fields[3] == "TRUE"
            expires = expiry == 0 ? nil : Date(timeIntervalSince1970: TimeInterval(expiry))
            name = fields[5]
            value = fields[6...].joined(separator: "\t")
        }
    }
}
