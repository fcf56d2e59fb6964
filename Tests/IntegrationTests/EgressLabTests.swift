import BrickTestSupport
import Foundation
import Glibc
import Testing

/// The egress policy against a resolver the test runs (`DNS/resolver.py`, dnslib) in a network
/// namespace of its own: names that point inside, and one that changes its answer between two
/// lookups (DNS rebinding). The namespace's `.2` plays the public internet (on the allow list);
/// listeners on `.2`, `.3`, `127.0.0.1` and `::1` (port 8081) count the connections they accept.
@Suite(
    "Egress policy in a network namespace with the test's resolver (root)",
    .serialized,
    .timeLimit(.minutes(3)),
    .enabled(if: VethLab.unavailableReason == nil, "\(VethLab.unavailableReason ?? "")")
)
struct EgressLabTests {
    static let port = 8081

    /// The lab and its four listeners, started on a thread of their own (starting them waits for
    /// Python processes to say they are ready: never on a thread of the cooperative pool).
    private func lab() async throws -> DNSLab {
        try await Subprocess.offPool {
            let lab = try DNSLab()
            for address in ["\(lab.subnet).2", "\(lab.subnet).3", "127.0.0.1", "::1"] {
                try lab.startCounter(address, port: Self.port)
            }
            return lab
        }
    }

    private func url(_ name: String) -> String { "http://\(name):\(Self.port)/who" }

    @Test("a name the resolver points at the namespace's own range, at ::1, at ::ffff:7f00:1 (127.0.0.1): refused, nothing accepted; unrestricted, it arrives")
    func pointsInside() async throws {
        let lab = try await lab()
        let allow = "public:\(lab.subnet).2/32"
        let cases: [(mode: String, name: String, listener: String, reason: String)] = [
            ("answer \(lab.subnet).3", "inside.brick.test", "\(lab.subnet).3", "is private"),
            ("answer6 ::1", "six.brick.test", "::1", "::1 is loopback"),
            ("answer6 ::ffff:7f00:1", "mapped.brick.test", "127.0.0.1", "IPv4-mapped"),
        ]
        for item in cases {
            try lab.resolver(item.mode)
            let refused = await lab.get(url: url(item.name), retries: 2, policy: allow)
            #expect(refused["kind"] == "egressRefused", "\(item.name): \(refused)")
            #expect(refused["retries"] == "0", "never retried: \(refused)")
            #expect(refused["message"]?.contains(item.reason) == true, "\(refused)")
            #expect(lab.accepts(item.listener, port: Self.port) == 0, "\(item.name) reached \(item.listener)")
            let allowed = await lab.get(url: url(item.name), retries: 0, policy: "unrestricted")
            #expect(allowed["outcome"] == "ok", "\(item.name): \(allowed)")
            #expect(lab.accepts(item.listener, port: Self.port) == 1)
        }
        // The allowed address itself is reached.
        try lab.resolver("answer \(lab.subnet).2")
        let fine = await lab.get(url: url("public.brick.test"), retries: 0, policy: allow)
        #expect(fine["outcome"] == "ok" && fine["body"] == "\(lab.subnet).2", "\(fine)")
    }

    @Test("DNS rebinding: a name that answered the allowed address, then 127.0.0.1 with TTL 0, is refused on the lookup that points inside")
    func rebinding() async throws {
        let lab = try await lab()
        try lab.resolver("rebind \(lab.subnet).2 127.0.0.1")
        let allow = "public:\(lab.subnet).2/32"
        let first = await lab.get(url: url("rebind.brick.test"), retries: 0, policy: allow)
        #expect(first["outcome"] == "ok" && first["body"] == "\(lab.subnet).2", "\(first)")
        let second = await lab.get(url: url("rebind.brick.test"), retries: 0, policy: allow)
        #expect(second["kind"] == "egressRefused", "\(second)")
        #expect(second["message"]?.contains("127.0.0.1 is loopback") == true, "\(second)")
        #expect(lab.accepts("127.0.0.1", port: Self.port) == 0)
        #expect(lab.accepts("\(lab.subnet).2", port: Self.port) == 1)
        #expect(lab.queries.filter { $0.contains("rebind.brick.test") && $0.contains(" A ") }.count >= 2, "\(lab.queries)")
    }
}
