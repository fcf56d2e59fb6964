import Glibc

/// An IPv4 or IPv6 address, parsed the way a URL's host is (IPv4 in decimal, octal, hexadecimal and
/// shortened spellings: `2130706433`, `0x7f.1`, `0177.0.0.1` and `127.1` are all `127.0.0.1`), and
/// its class for an ``EgressPolicy``. Pure: no I/O, no allocation in ``classify()``.
package struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// The 128 bits of an IPv6 address, or the IPv4 address in the low 32 bits of ``low``.
    package let high: UInt64
    package let low: UInt64
    package let isIPv4: Bool

    package init(ipv4: UInt32) {
        high = 0
        low = UInt64(ipv4)
        isIPv4 = true
    }

    package init(ipv6High high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
        isIPv4 = false
    }

    package var ipv4: UInt32 { UInt32(truncatingIfNeeded: low) }

    /// Parses an address literal: IPv4 in any spelling a URL parser accepts, IPv6 with or without
    /// brackets and a zone (`fe80::1%eth0`). `nil` for anything else (a host name).
    package init?(parsing text: some StringProtocol) {
        var bytes = Array(text.utf8)
        if bytes.first == UInt8(ascii: "["), bytes.last == UInt8(ascii: "]") { bytes = Array(bytes.dropFirst().dropLast()) }
        if let percent = bytes.firstIndex(of: UInt8(ascii: "%")) { bytes = Array(bytes[..<percent]) }
        if bytes.contains(UInt8(ascii: ":")) {
            var address = in6_addr()
            bytes.append(0)
            let parsed = bytes.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { inet_pton(AF_INET6, $0.baseAddress, &address) == 1 }
            }
            guard parsed else { return nil }
            self.init(in6: address)
        } else if let value = Self.parseIPv4(bytes) {
            self.init(ipv4: value)
        } else {
            return nil
        }
    }

    /// The address libcurl names as text (`127.0.0.1`, `::1`: `inet_ntop`'s forms), without
    /// allocating; `nil` for anything else.
    package init?(numericCString text: UnsafePointer<CChar>) {
        var address4 = in_addr()
        if inet_pton(AF_INET, text, &address4) == 1 {
            self.init(ipv4: UInt32(bigEndian: address4.s_addr))
            return
        }
        var address6 = in6_addr()
        guard inet_pton(AF_INET6, text, &address6) == 1 else { return nil }
        self.init(in6: address6)
    }

    /// The address of a `sockaddr_in6`'s `sin6_addr`.
    package init(in6 address: in6_addr) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        withUnsafeBytes(of: address) { raw in
            for index in 0..<8 { high = high << 8 | UInt64(raw[index]) }
            for index in 8..<16 { low = low << 8 | UInt64(raw[index]) }
        }
        self.init(ipv6High: high, low: low)
    }

    /// The address of a socket address (`AF_INET` or `AF_INET6`); `nil` for any other family.
    package init?(socketAddress: UnsafePointer<sockaddr>) {
        switch Int32(socketAddress.pointee.sa_family) {
        case AF_INET:
            let address = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            self.init(ipv4: UInt32(bigEndian: address.s_addr))
        case AF_INET6:
            let address = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            self.init(in6: address)
        default:
            return nil
        }
    }

    /// The WHATWG URL Standard's IPv4 parser (as libcurl's and browsers'): one to four parts, each
    /// decimal, `0x` hexadecimal or `0` octal; the last fills the remaining bytes. A trailing dot
    /// is allowed.
    static func parseIPv4(_ bytes: [UInt8]) -> UInt32? {
        var parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        if parts.count > 1, parts.last?.isEmpty == true { parts.removeLast() }
        guard (1...4).contains(parts.count) else { return nil }
        var numbers: [UInt64] = []
        for part in parts {
            guard !part.isEmpty else { return nil }
            var digits = part[...]
            var radix: UInt64 = 10
            if digits.count >= 2, digits.first == UInt8(ascii: "0"),
                digits[digits.index(after: digits.startIndex)] | 0x20 == UInt8(ascii: "x")
            {
                radix = 16
                digits = digits.dropFirst(2)
            } else if digits.count >= 2, digits.first == UInt8(ascii: "0") {
                radix = 8
                digits = digits.dropFirst()
            }
            var value: UInt64 = 0
            for byte in digits {
                let digit: UInt64
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt64(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt64(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt64(byte - UInt8(ascii: "A") + 10)
                default: return nil
                }
                guard digit < radix else { return nil }
                value = value * radix + digit
                if value > UInt64(UInt32.max) { return nil }
            }
            numbers.append(value)
        }
        for number in numbers.dropLast() where number > 255 { return nil }
        let last = numbers[numbers.count - 1]
        guard last < (1 as UInt64) << (8 * UInt64(5 - numbers.count)) else { return nil }
        var address = last
        for (index, number) in numbers.dropLast().enumerated() { address |= number << (8 * UInt64(3 - index)) }
        return UInt32(address)
    }

    /// Dotted IPv4, or IPv6 as `inet_ntop` writes it.
    package var description: String {
        if isIPv4 {
            let value = ipv4
            return "\(value >> 24).\(value >> 16 & 0xFF).\(value >> 8 & 0xFF).\(value & 0xFF)"
        }
        var address = in6_addr()
        withUnsafeMutableBytes(of: &address) { raw in
            for index in 0..<8 { raw[index] = UInt8(truncatingIfNeeded: high >> (8 * UInt64(7 - index))) }
            for index in 0..<8 { raw[8 + index] = UInt8(truncatingIfNeeded: low >> (8 * UInt64(7 - index))) }
        }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return "?" }
        return text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// Whether the first `prefix` bits equal those of `network` (of the same family).
    package func isIn(_ network: IPAddress, prefix: Int) -> Bool {
        guard isIPv4 == network.isIPv4 else { return false }
        if isIPv4 {
            guard prefix > 0 else { return true }
            let mask = UInt32.max << UInt32(32 - min(prefix, 32))
            return ipv4 & mask == network.ipv4 & mask
        }
        if prefix <= 64 {
            guard prefix > 0 else { return true }
            let mask = UInt64.max << UInt64(64 - prefix)
            return high & mask == network.high & mask
        }
        guard high == network.high else { return false }
        let mask = UInt64.max << UInt64(128 - min(prefix, 128))
        return low & mask == network.low & mask
    }

    /// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) carries: the same host on
    /// the wire.
    package var mappedIPv4: IPAddress? {
        !isIPv4 && high == 0 && low >> 32 == 0xFFFF ? IPAddress(ipv4: UInt32(truncatingIfNeeded: low)) : nil
    }

    // MARK: - Classification

    /// What an address is, for an ``EgressPolicy``: globally reachable unicast, or a special
    /// range by name.
    package enum Kind: String, Sendable, Hashable, CaseIterable {
        case global = "a public address"
        case loopback = "loopback"
        case privateUse = "private (RFC 1918)"
        case sharedAddressSpace = "shared address space (CGNAT, RFC 6598)"
        case linkLocal = "link-local (cloud metadata lives here)"
        case unspecified = "unspecified (this network)"
        case multicast = "multicast"
        case broadcast = "broadcast"
        case documentation = "documentation (TEST-NET)"
        case benchmarking = "benchmarking"
        case protocolAssignment = "IETF protocol assignments"
        case reserved = "reserved"
        case uniqueLocal = "unique local (fc00::/7)"
        case notGlobalUnicast = "not global unicast"
    }

    /// The class of this address, and through which IPv6 form it embeds an IPv4 address
    /// (`IPv4-mapped`, `IPv4-compatible`, `NAT64`, `6to4`) when that decided it.
    package func classify() -> (kind: Kind, via: String?) {
        if isIPv4 { return (Self.classify(ipv4: ipv4), nil) }
        // Forms that carry an IPv4 address: refused when it is, and, outside 2000::/3 (mapped and
        // compatible), refused anyway as not global unicast.
        if high == 0 {
            if low == 0 { return (.unspecified, nil) }
            if low == 1 { return (.loopback, nil) }
            let embedded = Self.classify(ipv4: UInt32(truncatingIfNeeded: low))
            if low >> 32 == 0xFFFF { return (embedded == .global ? .notGlobalUnicast : embedded, "IPv4-mapped") }
            if low >> 32 == 0 { return (embedded == .global ? .notGlobalUnicast : embedded, "IPv4-compatible") }
            return (.reserved, nil)
        }
        if high == 0x0064_FF9B_0000_0000 && low >> 32 == 0 {  // 64:ff9b::/96, NAT64
            let embedded = Self.classify(ipv4: UInt32(truncatingIfNeeded: low))
            return (embedded, embedded == .global ? nil : "NAT64")
        }
        let top16 = UInt16(truncatingIfNeeded: high >> 48)
        if top16 == 0x2002 {  // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD
            let embedded = Self.classify(ipv4: UInt32(truncatingIfNeeded: high >> 16))
            return (embedded, embedded == .global ? nil : "6to4")
        }
        if top16 & 0xFF00 == 0xFF00 { return (.multicast, nil) }
        if top16 & 0xFE00 == 0xFC00 { return (.uniqueLocal, nil) }
        if top16 & 0xFFC0 == 0xFE80 { return (.linkLocal, nil) }
        guard top16 & 0xE000 == 0x2000 else { return (.notGlobalUnicast, nil) }  // 2000::/3
        if high >> 32 == 0x2001_0DB8 { return (.documentation, nil) }  // 2001:db8::/32
        if high >> 44 == 0x3FFF0 { return (.documentation, nil) }  // 3fff::/20
        if high >> 41 == 0x2001_0000 >> 9 {
            return (.protocolAssignment, nil)  // 2001::/23 (Teredo, benchmarking, ORCHID among them)
        }
        return (.global, nil)
    }

    /// The class of an IPv4 address (IANA's special-purpose registry; anything not global is
    /// refused).
    package static func classify(ipv4 value: UInt32) -> Kind {
        let first = value >> 24
        let second = value >> 16 & 0xFF
        switch first {
        case 0: return .unspecified
        case 10: return .privateUse
        case 100 where second & 0xC0 == 64: return .sharedAddressSpace
        case 127: return .loopback
        case 169 where second == 254: return .linkLocal
        case 172 where second & 0xF0 == 16: return .privateUse
        case 192 where second == 168: return .privateUse
        case 192 where second == 0 && value >> 8 & 0xFF == 0: return .protocolAssignment
        case 192 where second == 0 && value >> 8 & 0xFF == 2: return .documentation
        case 192 where second == 88 && value >> 8 & 0xFF == 99: return .reserved  // former 6to4 relays
        case 198 where second & 0xFE == 18: return .benchmarking
        case 198 where second == 51 && value >> 8 & 0xFF == 100: return .documentation
        case 203 where second == 0 && value >> 8 & 0xFF == 113: return .documentation
        case 224...239: return .multicast
        case 255 where value == .max: return .broadcast
        case 240...255: return .reserved
        default: return .global
        }
    }
}
