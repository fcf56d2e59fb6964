@testable import BrickRequestCore
import BrickTestSupport
import Foundation
import Testing

@Suite("Egress policy: the address classifier (pure), checked against Python's ipaddress", .timeLimit(.minutes(3)))
struct EgressPolicyClassifierTests {
    typealias Kind = IPAddress.Kind

    /// Every range `.publicInternetOnly` refuses, its edges, embedded forms, and public neighbours.
    static let table: [(String, Kind)] = [
        ("0.0.0.0", .unspecified), ("0.255.255.255", .unspecified),
        ("10.0.0.1", .privateUse), ("10.255.255.255", .privateUse), ("11.0.0.1", .global), ("9.255.255.255", .global),
        ("100.64.0.1", .sharedAddressSpace), ("100.127.255.255", .sharedAddressSpace), ("100.63.255.255", .global),
        ("100.128.0.0", .global),
        ("127.0.0.1", .loopback), ("127.255.255.254", .loopback),
        ("169.254.169.254", .linkLocal), ("169.254.0.1", .linkLocal), ("169.253.255.255", .global),
        ("172.16.0.1", .privateUse), ("172.31.255.255", .privateUse), ("172.15.255.255", .global), ("172.32.0.0", .global),
        ("192.0.0.1", .protocolAssignment), ("192.0.0.170", .protocolAssignment), ("192.0.2.1", .documentation),
        ("192.88.99.1", .reserved), ("192.168.1.1", .privateUse), ("192.169.0.1", .global),
        ("198.18.0.1", .benchmarking), ("198.19.255.255", .benchmarking), ("198.20.0.0", .global),
        ("198.51.100.7", .documentation), ("203.0.113.9", .documentation),
        ("224.0.0.1", .multicast), ("239.255.255.255", .multicast),
        ("240.0.0.1", .reserved), ("255.255.255.254", .reserved), ("255.255.255.255", .broadcast),
        ("8.8.8.8", .global), ("1.1.1.1", .global), ("93.184.216.34", .global),
        // IPv6
        ("::", .unspecified), ("::1", .loopback),
        ("::ffff:127.0.0.1", .loopback), ("::ffff:10.0.0.1", .privateUse), ("::ffff:169.254.169.254", .linkLocal),
        ("::ffff:8.8.8.8", .notGlobalUnicast), ("::127.0.0.1", .loopback), ("::8.8.8.8", .notGlobalUnicast),
        ("64:ff9b::127.0.0.1", .loopback), ("64:ff9b::a9fe:a9fe", .linkLocal), ("64:ff9b::8.8.8.8", .global),
        ("64:ff9b:1::1", .notGlobalUnicast),
        ("2002:7f00:1::", .loopback), ("2002:a00:1::1", .privateUse), ("2002:808:808::1", .global),
        ("fc00::1", .uniqueLocal), ("fd12:3456::1", .uniqueLocal), ("fe80::1", .linkLocal), ("febf::1", .linkLocal),
        ("fec0::1", .notGlobalUnicast), ("ff02::1", .multicast), ("ff0e::1", .multicast),
        ("100::1", .notGlobalUnicast), ("2001:db8::1", .documentation), ("2001::1", .protocolAssignment),
        ("2001:2::1", .protocolAssignment), ("2001:10::1", .protocolAssignment), ("2001:1ff::1", .protocolAssignment),
        ("3fff::1", .documentation), ("3fff:fff::1", .documentation),
        ("2001:4860:4860::8888", .global), ("2606:4700::1111", .global), ("2a00:1450::1", .global),
        ("4000::1", .notGlobalUnicast), ("1fff::1", .notGlobalUnicast),
    ]

    @Test("every range and edge classifies as the table says")
    func table() throws {
        for (text, expected) in Self.table {
            let address = try #require(IPAddress(parsing: text), "\(text) did not parse")
            #expect(address.classify().kind == expected, "\(text): \(address.classify())")
        }
    }

    @Test("Python's ipaddress agrees: nothing it calls private is allowed, and everything allowed it calls global")
    func python() async throws {
        let addresses = Self.table.map(\.0)
        let script = """
            import ipaddress, json, sys
            out = {}
            for text in json.load(sys.stdin):
                a = ipaddress.ip_address(text)
                out[text] = [a.is_global, a.is_private]
            print(json.dumps(out))
            """
        let directory = NSTemporaryDirectory() + "brick-egress-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try script.write(toFile: directory + "/check.py", atomically: true, encoding: .utf8)
        try JSONEncoder().encode(addresses).write(to: URL(fileURLWithPath: directory + "/addresses.json"))
        let output = try await Subprocess.run("python3 '\(directory)/check.py' < '\(directory)/addresses.json'")
        let verdicts = try JSONDecoder().decode([String: [Bool]].self, from: Data(output.utf8))
        #expect(verdicts.count == addresses.count)
        for (text, expected) in Self.table {
            let verdict = try #require(verdicts[text], "\(text)")
            let (isGlobal, isPrivate) = (verdict[0], verdict[1])
            if expected == .global { #expect(isGlobal, "\(text): allowed here, not global for Python") }
            if isPrivate { #expect(expected != .global, "\(text): private for Python, allowed here") }
        }
    }

    @Test("IPv4 spellings: decimal, hexadecimal, octal, short forms are one address; malformed ones are names")
    func spellings() {
        let loopback = IPAddress(ipv4: 0x7F00_0001)
        for text in ["127.0.0.1", "2130706433", "0x7f000001", "0X7F000001", "0177.0.0.1", "0177.0.0.01", "127.1", "127.0.1",
            "0x7f.1", "127.0.0.1.", "[::ffff:7f00:1]"]
        {
            let parsed = IPAddress(parsing: text)
            #expect(parsed == loopback || parsed?.mappedIPv4 == loopback, "\(text) → \(String(describing: parsed))")
        }
        for text in ["256.0.0.1", "1.2.3.4.5", "0x1g.0.0.1", "08.0.0.1", "example.com", "1.2.3.256", "4294967296", "", "1..2"] {
            #expect(IPAddress(parsing: text) == nil, "\(text) parsed")
        }
    }

    @Test("allow and deny entries: names, wildcards, ranges; malformed ones throw, naming the text")
    func destinations() throws {
        let policy = EgressPolicy.publicInternetOnly(allowing: ["10.20.0.0/16", "hooks.internal", "*.corp.example"], denying: ["8.8.4.4"])
        let private10 = IPAddress(parsing: "10.20.1.1")!
        #expect(policy.refusal(connectingTo: private10, host: "x") == nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "10.21.0.1")!, host: "x") != nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "10.9.9.9")!, host: "HOOKS.internal.") == nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "10.9.9.9")!, host: "a.b.corp.example") == nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "10.9.9.9")!, host: "corp.example") != nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "::ffff:10.20.3.4")!, host: "x") == nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "8.8.4.4")!, host: "dns") != nil)
        #expect(policy.refusal(connectingTo: IPAddress(parsing: "8.8.8.8")!, host: "dns") == nil)
        for bad in ["10.0.0.0/33", "::/129", "a..b", "", "10.0.0.0/x", "bad host", "/8"] {
            #expect(throws: BrickError.self) { try EgressPolicy.Destination(bad) }
        }
        // Codable round trip (an offline queue stores an endpoint's policy).
        let data = try JSONEncoder().encode(policy)
        #expect(try JSONDecoder().decode(EgressPolicy.self, from: data) == policy)
    }
}
