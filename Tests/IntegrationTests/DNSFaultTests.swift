import BrickTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// A network namespace with a resolver of the test's (`DNS/resolver.py`, Python `dnslib`) named
/// in its `resolv.conf`, two HTTP servers, and `brick-dns-probe` running inside it: the client's
/// name lookups go only to that resolver (`ip netns exec` mounts `/etc/netns/NAME/resolv.conf`
/// over `/etc/resolv.conf` for the probe alone).
final class DNSLab: @unchecked Sendable {  // `output` locks itself; the rest is set in `init`, `pids` changed only by the owning test
    let namespace: String
    let subnet: String
    let directory: String
    private var pids: [String: pid_t] = [:]
    private var probe: pid_t = -1
    /// The probe's process (for the test that the lab leaves nothing behind).
    var probeProcess: pid_t { probe }
    private var input: Int32 = -1
    /// The probe's output so far. Its reader thread holds this box, never the lab: holding the lab
    /// kept it alive until the probe ended, and the probe is ended by the lab's `deinit` — every
    /// lab's namespace and processes outlived its test.
    private let output = ProbeOutput()

    private final class ProbeOutput: Sendable {
        let data = Mutex(Data())
    }

    static let resolverScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("DNS/resolver.py").path
    static let counter = Atomic(0)

    /// - Parameters:
    ///   - resolverOptions: The `options` line of the namespace's resolv.conf.
    ///   - connectTimeout: The probe session's connect timeout.
    init(resolverOptions: String = "timeout:1 attempts:1", connectTimeout: Duration = .seconds(10)) throws {
        let number = Self.counter.add(1, ordering: .relaxed).newValue
        let id = (Int(getpid()) * 7 + number) % 200 + 20
        namespace = "brick-dns-\(getpid())-\(number)"
        subnet = "10.216.\(id)"
        directory = NSTemporaryDirectory() + "brick-dns-" + UUID().uuidString
        let (ns, net, d) = (namespace, subnet, directory)
        try NginxFixture.shell(
            """
            set -e
            mkdir -p '\(d)/www2' '\(d)/www3' /etc/netns/\(ns)
            echo server-2 > '\(d)/www2/who'
            echo server-3 > '\(d)/www3/who'
            echo 'answer \(net).2' > '\(d)/control'
            printf 'nameserver \(net).53\\noptions \(resolverOptions)\\n' > /etc/netns/\(ns)/resolv.conf
            ip netns add \(ns)
            ip netns exec \(ns) ip link set lo up
            ip netns exec \(ns) ip link add d0 type veth peer name d1
            for host in 2 3 53; do ip netns exec \(ns) ip addr add \(net).$host/24 dev d0; done
            ip netns exec \(ns) ip link set d1 up
            ip netns exec \(ns) ip link set d0 up
            ip netns exec \(ns) ip route add default dev d0
            """
        )
        do {
            pids["resolver"] = try Subprocess.spawn(
                "exec ip netns exec \(ns) python3 '\(Self.resolverScript)' \(net).53 '\(d)/control' '\(d)/queries' > '\(d)/resolver.out' 2>&1"
            )
            for host in [2, 3] {
                pids["server-\(host)"] = try Subprocess.spawn(
                    "exec ip netns exec \(ns) python3 -m http.server 8080 --bind \(net).\(host) --directory '\(d)/www\(host)'"
                )
            }
            try Self.waitFor("the resolver") {
                (try? String(contentsOfFile: d + "/resolver.out", encoding: .utf8))?.contains("ready") == true
            }
            for host in [2, 3] {
                try Self.waitFor("the HTTP server on .\(host)") {
                    (try? NginxFixture.shell("ip netns exec \(ns) curl -sf http://\(net).\(host):8080/who")) != nil
                }
            }
            var outputs: [Int32] = [0, 0]
            var inputs: [Int32] = [0, 0]
            guard pipe(&outputs) == 0, pipe(&inputs) == 0 else { throw Subprocess.Failure(description: "pipe failed") }
            probe = try Subprocess.spawn(
                "exec ip netns exec \(ns) '\(Self.probePath)' \(connectTimeout.components.seconds * 1000 + connectTimeout.components.attoseconds / 1_000_000_000_000_000)",
                stdout: outputs[1],
                stdin: inputs[0]
            )
            close(outputs[1])
            close(inputs[0])
            input = inputs[1]
            let (readEnd, output) = (outputs[0], output)
            Thread.detachNewThread {
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = read(readEnd, &chunk, chunk.count)
                    if count <= 0 { break }
                    output.data.withLock { $0.append(contentsOf: chunk[0..<count]) }
                }
                close(readEnd)
            }
            try Self.waitFor("the probe") { self.lines.contains("ready") }
        } catch {
            tearDown()
            throw error
        }
    }

    static var probePath: String {
        URL(fileURLWithPath: LargeDownloadMemoryTests.probePath).deletingLastPathComponent()
            .appendingPathComponent("brick-dns-probe").path
    }

    private static func waitFor(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(20)
        while !condition() {
            guard Date() < deadline else { throw NginxFixture.FixtureError(message: "\(what) did not start") }
            usleep(20_000)
        }
    }

    var lines: [String] {
        output.data.withLock { String(decoding: $0, as: UTF8.self) }.split(separator: "\n").map(String.init)
    }

    /// The resolver's mode from now on (`answer IP`, `drop`, `servfail N IP`, `nxdomain`, `truncate IP`).
    func resolver(_ mode: String) throws {
        try mode.write(toFile: directory + "/control", atomically: true, encoding: .utf8)
    }

    /// The queries the resolver saw: `udp|tcp NAME TYPE RCODE`.
    var queries: [String] {
        ((try? String(contentsOfFile: directory + "/queries", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Stops the HTTP server on `.host`.
    func stopServer(_ host: Int) {
        if let pid = pids.removeValue(forKey: "server-\(host)") {
            kill(pid, SIGKILL)
            _ = Subprocess.wait(pid)
        }
    }

    static let counterScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("DNS/accept_counter.py").path

    /// Starts a listener in the namespace on `address`:`port` that counts the connections it
    /// accepts and answers each with `address` (see ``accepts(_:port:)``).
    func startCounter(_ address: String, port: Int) throws {
        let log = "\(directory)/accepts-\(address)-\(port)"
        let out = log + ".out"
        pids["counter-\(address)-\(port)"] = try Subprocess.spawn(
            "exec ip netns exec \(namespace) python3 '\(Self.counterScript)' '\(address)' \(port) '\(address)' '\(log)' > '\(out)' 2>&1"
        )
        try Self.waitFor("the listener on \(address)") {
            (try? String(contentsOfFile: out, encoding: .utf8))?.contains("ready") == true
        }
    }

    /// Connections the listener on `address`:`port` accepted so far.
    func accepts(_ address: String, port: Int) -> Int {
        ((try? String(contentsOfFile: "\(directory)/accepts-\(address)-\(port)", encoding: .utf8)) ?? "")
            .split(separator: "\n").count
    }

    /// A GET of `http://NAME:8080/who` by the probe, with `retries` retries; its result's fields.
    func get(_ name: String, retries: Int) async -> [String: String] {
        await get(url: "http://\(name):8080/who", retries: retries, policy: nil)
    }

    /// A GET of `url` by the probe, on a new session with egress `policy` when given (`public`,
    /// `public:RANGE`, `unrestricted`); its result's fields.
    func get(url: String, retries: Int, policy: String?) async -> [String: String] {
        let before = lines.filter { $0.hasPrefix("result ") }.count
        let command = Array("get \(url) \(retries)\(policy.map { " " + $0 } ?? "")\n".utf8)
        _ = command.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        let line = await poll(within: .seconds(60)) {
            let results = lines.filter { $0.hasPrefix("result ") }
            return results.count > before ? results.last : nil
        }
        guard let line else { return ["outcome": "none"] }
        var fields: [String: String] = ["outcome": String(line.split(separator: " ")[1])]
        let message = line.range(of: " message=").map { String(line[$0.upperBound...]) }
        let head = line.range(of: " message=").map { String(line[..<$0.lowerBound]) } ?? line
        for field in head.split(separator: " ").dropFirst(2) {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        fields["message"] = message
        return fields
    }

    func tearDown() {
        if input > 0 { close(input) }
        // Killed and reaped: no process of the lab outlives it, not even as a zombie.
        for pid in [probe] + Array(pids.values) where pid > 0 {
            kill(pid, SIGKILL)
            _ = Subprocess.wait(pid)
        }
        _ = try? NginxFixture.shell("ip netns del \(namespace) 2>/dev/null; rm -rf /etc/netns/\(namespace) '\(directory)'")
    }

    deinit { tearDown() }
}

@Suite(
    "DNS faults from a resolver in a network namespace (root)",
    .serialized,
    .timeLimit(.minutes(3)),
    .enabled(if: VethLab.unavailableReason == nil, "\(VethLab.unavailableReason ?? "")")
)
struct DNSFaultTests {
    @Test("a lab leaves nothing behind: its namespace and its processes end with it")
    func labCleansUp() async throws {
        let (namespace, probe) = try await Subprocess.offPool { () throws -> (String, pid_t) in
            let lab = try DNSLab()
            return (lab.namespace, lab.probeProcess)
        }
        // The lab was released above (its `deinit` runs then, on that thread): nothing of it is left.
        #expect(try NginxFixture.shell("ip netns list").contains(namespace) == false)
        #expect(kill(probe, 0) == -1 && errno == ESRCH, "the probe still runs")
    }

    @Test("a resolver that never answers: the lookup ends at the connect timeout, not the resolver's, and says so")
    func noAnswer() async throws {
        let lab = try await Subprocess.offPool { try DNSLab(resolverOptions: "timeout:5 attempts:2", connectTimeout: .seconds(1)) }
        try lab.resolver("drop")
        let result = await lab.get("api.brick.test", retries: 1)
        #expect(result["kind"] == "timedOut", "\(result)")
        #expect(result["message"]?.contains("the host name was not resolved in time") == true, "\(result)")
        #expect(result["retries"] == "1")
        // Two lookups of 1 s and a 0.2 s pause, not the resolver's 10 s.
        #expect(Int(result["ms"] ?? "") ?? .max < 5_000, "\(result)")
    }

    @Test("SERVFAIL: the lookup fails at once (cannotResolveHost) and is retried; the next lookup's answer is used")
    func servfail() async throws {
        let lab = try await Subprocess.offPool { try DNSLab() }
        try lab.resolver("servfail 100 \(lab.subnet).2")
        let failed = await lab.get("down.brick.test", retries: 0)
        #expect(failed["kind"] == "cannotResolveHost", "\(failed)")
        #expect(Int(failed["ms"] ?? "") ?? .max < 1_000, "\(failed)")
        // The first lookup of a new name fails (both its queries), the retry's succeeds.
        try lab.resolver("servfail 2 \(lab.subnet).2")
        let recovered = await lab.get("flaky.brick.test", retries: 3)
        #expect(recovered["outcome"] == "ok", "\(recovered)")
        #expect(recovered["body"] == "server-2")
        #expect(recovered["retries"] == "1", "\(recovered)")
    }

    @Test("NXDOMAIN: cannotResolveHost naming the host, retried as many times as allowed while the network is up, then delivered")
    func nxdomain() async throws {
        let lab = try await Subprocess.offPool { try DNSLab() }
        try lab.resolver("nxdomain")
        let result = await lab.get("typo.brick.test", retries: 2)
        #expect(result["kind"] == "cannotResolveHost", "\(result)")
        #expect(result["message"]?.contains("typo.brick.test") == true, "\(result)")
        #expect(result["retries"] == "2")
        #expect(lab.queries.filter { $0.contains("typo.brick.test") && $0.contains("NXDOMAIN") }.count >= 3)
    }

    @Test("a truncated answer: the lookup asks again over TCP and succeeds")
    func truncated() async throws {
        let lab = try await Subprocess.offPool { try DNSLab() }
        try lab.resolver("truncate \(lab.subnet).3")
        let result = await lab.get("big.brick.test", retries: 0)
        #expect(result["outcome"] == "ok", "\(result)")
        #expect(result["body"] == "server-3")
        #expect(lab.queries.contains { $0.hasPrefix("udp big.brick.test") && $0.hasSuffix(" TC") })
        #expect(lab.queries.contains { $0.hasPrefix("tcp big.brick.test A NOERROR") }, "\(lab.queries)")
    }

    @Test("an answer that changes (the service moved): the first failed connection drops the cached address, and the retry reaches the new one")
    func answerChanges() async throws {
        let lab = try await Subprocess.offPool { try DNSLab() }
        try lab.resolver("answer \(lab.subnet).2")
        let first = await lab.get("moving.brick.test", retries: 0)
        #expect(first["body"] == "server-2", "\(first)")
        // The service moves to .3; .2 goes away. libcurl's DNS cache would keep .2 for 60 s.
        try lab.resolver("answer \(lab.subnet).3")
        lab.stopServer(2)
        let second = await lab.get("moving.brick.test", retries: 2)
        #expect(second["outcome"] == "ok", "\(second)")
        #expect(second["body"] == "server-3", "\(second)")
        #expect(second["retries"] == "1", "\(second)")
    }
}
