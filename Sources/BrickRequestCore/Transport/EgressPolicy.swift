import FoundationEssentials

/// Which addresses a request may reach: the defence against server-side request forgery (SSRF)
/// for a service that sends to URLs other people give it (webhooks, link previews, imports).
///
/// ```swift
/// var configuration = Session.Configuration()
/// configuration.egressPolicy = .publicInternetOnly
/// let webhooks = Session(configuration: configuration)
/// ```
///
/// **Checked where it cannot be fooled.** The curl transport checks the address each connection
/// is actually opened to, in the socket callback, before `connect`: every candidate address of a
/// name (IPv6 and IPv4 alike), every redirect hop, and a reused connection before a request goes
/// out on it. A name that resolves to a public address for a check and to `127.0.0.1` for the
/// connect (DNS rebinding) has no gap to pass through, and a public endpoint answering
/// `302 Location: http://169.254.169.254/` is refused at the hop.
///
/// **A refusal** fails the request with ``BrickError/Code/egressRefused`` (a ``TransportError``
/// of kind ``TransportError/Kind/egressRefused``) naming the host, the address and its class;
/// no byte goes to the refused address, and it is never retried. The offline queues set such an
/// entry aside as a dead letter at its first attempt, with that reason.
///
/// ``publicInternetOnly`` refuses every address that is not global unicast: loopback, private
/// (RFC 1918), shared (CGNAT `100.64.0.0/10`), link-local (`169.254.0.0/16`, where cloud
/// metadata services answer), `0.0.0.0/8`, multicast, broadcast, reserved, the IETF, documentation
/// and benchmarking ranges; in IPv6 `::1`, `::`, unique local `fc00::/7`, link-local `fe80::/10`,
/// multicast, IPv4-mapped and -compatible forms, NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`)
/// forms of any refused IPv4 address, and anything outside `2000::/3`.
///
/// **Allow and deny lists** name hosts (`hooks.partner.example`, or `*.partner.example` for its
/// subdomains) and ranges (`10.20.0.0/16`, `127.0.0.2`, `fd00::/8`). A deny entry refuses under
/// any policy. An allow entry lets ``publicInternetOnly`` reach it: an allowed range by address,
/// an allowed host whatever it resolves to (you trust its DNS).
///
/// **A proxy** hides the destination's address from the client: under a restricted policy, a
/// request that would go through one is refused unless the policy trusts the proxy to enforce
/// the same rule (``trustingProxy()``; Smokescreen is such a proxy). A Unix domain socket
/// (`TransportConfiguration.unixSocketPath`) is the service's own choice and not checked.
///
/// Enforced by the curl transport a session makes. Another ``Transport`` sees the policy in
/// ``TransportRequest/Options/egressPolicy`` and must enforce it itself.
public struct EgressPolicy: Sendable, Hashable, Codable, CustomStringConvertible {
    package enum Mode: String, Sendable, Hashable, Codable {
        case unrestricted
        case publicInternetOnly
    }

    package let mode: Mode
    /// Reachable under ``publicInternetOnly`` whatever their class.
    package let allowed: [Destination]
    /// Refused under any mode.
    package let denied: [Destination]
    /// Whether a proxy is trusted to enforce the policy (requests may go through one).
    public let trustsProxy: Bool

    private init(mode: Mode, allowed: [Destination], denied: [Destination], trustsProxy: Bool) {
        self.mode = mode
        self.allowed = allowed
        self.denied = denied
        self.trustsProxy = trustsProxy
    }

    /// Any address: the default of a plain ``Session``.
    public static let unrestricted = EgressPolicy(mode: .unrestricted, allowed: [], denied: [], trustsProxy: true)

    /// Global unicast addresses only (see the type's documentation for every refused range).
    public static let publicInternetOnly = EgressPolicy(
        mode: .publicInternetOnly,
        allowed: [],
        denied: [],
        trustsProxy: false
    )

    /// Global unicast addresses, and the hosts and ranges of `allowing`; never those of `denying`.
    ///
    /// - Parameters:
    ///   - allowing: Hosts and ranges reachable even though they are not public
    ///     (`"10.20.0.0/16"`, `"hooks.internal.example"`).
    ///   - denying: Hosts and ranges never reached, even when public.
    /// - Returns: The policy.
    public static func publicInternetOnly(allowing: [Destination], denying: [Destination] = []) -> EgressPolicy {
        EgressPolicy(mode: .publicInternetOnly, allowed: allowing, denied: denying, trustsProxy: false)
    }

    /// Any address except the hosts and ranges of `denying`.
    ///
    /// - Parameter denying: Hosts and ranges never reached.
    /// - Returns: The policy.
    public static func unrestricted(denying: [Destination]) -> EgressPolicy {
        EgressPolicy(mode: .unrestricted, allowed: [], denied: denying, trustsProxy: false)
    }

    /// This policy, with requests allowed through a proxy, which is trusted to enforce it (the
    /// client sees only the proxy's address).
    ///
    /// - Returns: The policy, trusting the proxy.
    public func trustingProxy() -> EgressPolicy {
        EgressPolicy(mode: mode, allowed: allowed, denied: denied, trustsProxy: true)
    }

    /// Whether the policy lets every request through unchecked (``unrestricted`` without a
    /// deny list).
    package var isUnrestricted: Bool { mode == .unrestricted && denied.isEmpty }

    /// `unrestricted`, `publicInternetOnly`, then the lists.
    public var description: String {
        var text = mode.rawValue
        if !allowed.isEmpty { text += " allowing \(allowed.map(\.description).joined(separator: ", "))" }
        if !denied.isEmpty { text += " denying \(denied.map(\.description).joined(separator: ", "))" }
        if trustsProxy && mode != .unrestricted { text += ", trusting the proxy" }
        return text
    }

    // MARK: - The decision

    /// Why a connection to `address`, for a request to `host`, is refused; `nil` when it may be
    /// opened. Pure; the host is asked for only when a list names hosts or the answer is a
    /// refusal (working it out of a request's URL costs more than the whole check).
    ///
    /// - Parameters:
    ///   - address: The address the socket is about to connect to.
    ///   - host: The request's host (the current redirect hop's), as in its URL.
    package func refusal(connectingTo address: IPAddress, host: () -> String) -> String? {
        if !denied.isEmpty {
            let name = denied.contains { !$0.isRange } ? host() : nil
            if let entry = denied.first(where: { $0.matches(address: address) || name.map($0.matches(host:)) == true }) {
                return "\(name ?? host()) → \(address) is on the egress policy's deny list (\(entry))"
            }
        }
        guard mode == .publicInternetOnly else { return nil }
        if !allowed.isEmpty {
            let name = allowed.contains { !$0.isRange } ? host() : nil
            if allowed.contains(where: { $0.matches(address: address) || name.map($0.matches(host:)) == true }) { return nil }
        }
        let (kind, via) = address.classify()
        guard kind != .global else { return nil }
        let form = via.map { " (\($0) form)" } ?? ""
        return "\(host()) → \(address) is \(kind.rawValue)\(form), which the egress policy (publicInternetOnly) does not reach"
    }

    /// ``refusal(connectingTo:host:)`` for a host already known.
    package func refusal(connectingTo address: IPAddress, host: String) -> String? {
        refusal(connectingTo: address) { host }
    }

    // MARK: - Destinations

    /// A host or an address range of an allow or deny list: `"api.example.com"`,
    /// `"*.example.com"` (its subdomains), `"10.0.0.0/8"`, `"127.0.0.2"`, `"fd00::/8"`.
    ///
    /// A string literal that is not one traps (a programming error, as a malformed regular
    /// expression literal would); text read at run time goes through ``init(_:)``, which throws.
    public struct Destination: Sendable, Hashable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
        enum Form: Hashable {
            /// A host name, lowercased, without a trailing dot.
            case host(String)
            /// `*.example.com`: `.example.com`, lowercased.
            case subdomains(String)
            /// An address range.
            case range(IPAddress, prefix: Int)
        }

        let form: Form

        /// Parses a host, a `*.` wildcard host, an address or a CIDR range.
        ///
        /// - Parameter text: The destination.
        /// - Throws: ``BrickError/Code/invalidRequest`` for an empty name, a malformed range or a
        ///   prefix length too long for its family.
        public init(_ text: String) throws(BrickError) {
            let trimmed = text.utf8.last == UInt8(ascii: ".") ? String(text.dropLast()) : text
            if let slash = trimmed.firstIndex(of: "/") {
                guard let address = IPAddress(parsing: trimmed[..<slash]),
                    let prefix = Int(trimmed[trimmed.index(after: slash)...]),
                    prefix >= 0, prefix <= (address.isIPv4 ? 32 : 128)
                else {
                    throw BrickError(.invalidRequest, message: "\(text.debugDescription) is not an address range (a.b.c.d/n or x::/n)")
                }
                form = .range(address, prefix: prefix)
            } else if let address = IPAddress(parsing: trimmed) {
                form = .range(address, prefix: address.isIPv4 ? 32 : 128)
            } else {
                let name = trimmed.lowercased()
                let bare = name.hasPrefix("*.") ? String(name.dropFirst(2)) : name
                guard !bare.isEmpty,
                    bare.utf8.allSatisfy({ $0.isHostNameByte }),
                    !bare.hasPrefix("."), !bare.contains("..")
                else {
                    throw BrickError(.invalidRequest, message: "\(text.debugDescription) is not a host name, address or range")
                }
                form = name.hasPrefix("*.") ? .subdomains("." + bare) : .host(bare)
            }
        }

        /// A literal destination; traps when it is not one (see the type's documentation).
        ///
        /// - Parameter value: The destination.
        public init(stringLiteral value: String) {
            do {
                try self.init(value)
            } catch {
                preconditionFailure("EgressPolicy.Destination: \(error.message)")
            }
        }

        /// As written (`*.example.com`, `10.0.0.0/8`, `127.0.0.2/32`).
        public var description: String {
            switch form {
            case .host(let name): name
            case .subdomains(let suffix): "*" + suffix
            case .range(let address, let prefix): "\(address)/\(prefix)"
            }
        }

        /// Decodes the text form.
        ///
        /// - Parameter decoder: The decoder.
        public init(from decoder: any Decoder) throws {
            let text = try decoder.singleValueContainer().decode(String.self)
            try self.init(text)
        }

        /// Encodes the text form.
        ///
        /// - Parameter encoder: The encoder.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(description)
        }

        /// Whether this entry is an address range (not a host name).
        var isRange: Bool {
            if case .range = form { return true }
            return false
        }

        func matches(address: IPAddress) -> Bool {
            guard case .range(let network, let prefix) = form else { return false }
            if address.isIn(network, prefix: prefix) { return true }
            // `::ffff:a.b.c.d` is a.b.c.d on the wire.
            if let mapped = address.mappedIPv4 { return mapped.isIn(network, prefix: prefix) }
            return false
        }

        func matches(host: String) -> Bool {
            switch form {
            case .range: return false
            case .host(let name): return Self.equalsIgnoringCase(host, name)
            case .subdomains(let suffix):
                let bytes = Array(host.utf8)
                let suffixBytes = Array(suffix.utf8)
                guard bytes.count > suffixBytes.count else { return false }
                return Self.equalsIgnoringCase(
                    String(decoding: bytes[(bytes.count - suffixBytes.count)...], as: UTF8.self),
                    suffix
                )
            }
        }

        private static func equalsIgnoringCase(_ host: String, _ lowered: String) -> Bool {
            var host = Array(host.utf8)
            if host.last == UInt8(ascii: ".") { host.removeLast() }
            let other = Array(lowered.utf8)
            guard host.count == other.count else { return false }
            for (a, b) in zip(host, other) {
                let folded = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(a) ? a | 0x20 : a
                if folded != b { return false }
            }
            return true
        }
    }
}

extension UInt8 {
    fileprivate var isHostNameByte: Bool {
        switch self {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"),
            UInt8(ascii: "."), UInt8(ascii: "_"):
            true
        default: self >= 0x80
        }
    }
}
