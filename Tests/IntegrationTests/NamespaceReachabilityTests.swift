import BrickRequest
import BrickTestSupport
import Foundation
import Synchronization
import Testing

/// A network namespace with a veth pair to this (the test's) namespace and an HTTP server inside:
/// the client's link can be taken down and up without touching the machine's real interfaces.
final class VethLab: Sendable {
    let namespace: String
    let hostInterface: String
    let serverAddress: String
    let port = 8080
    /// While the link is down, this route (an `unreachable` route with a high metric) keeps the
    /// lab's traffic from following the default route out of the machine.
    let subnetRoute: String
    private let server: pid_t

    static var unavailableReason: String? {
        if getuid() != 0 { return "needs root to create network namespaces" }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") else {
            return "needs /usr/bin/python3 for the namespace's HTTP server"
        }
        guard
            (try? NginxFixture.shell("ip netns add brick-probe-\(getpid()) && ip netns del brick-probe-\(getpid())"))
                != nil
        else {
            return "`ip netns add` failed: network namespaces cannot be created here"
        }
        return nil
    }

    init() throws {
        Self.removeAbandonedLabs()
        namespace = "brick-ns-\(getpid())"
        hostInterface = "bkc\(getpid() % 100_000)"
        let peer = "bks\(getpid() % 100_000)"
        // A /24 of 10.213.0.0/16 that nothing on the machine uses (another test process's lab, one
        // a killed run left behind): tried from the one this process's ID names, until one is set up.
        var chosen: (route: String, server: String)?
        var failures: [String] = []
        for offset in 0..<200 where chosen == nil {
            let net = "10.213.\((Int(getpid()) + offset) % 200 + 20)"
            let inUse = (try? NginxFixture.shell("ip route show \(net).0/24; ip -o -4 addr show to \(net).0/24")) ?? "unknown"
            if !inUse.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { continue }
            do {
                try NginxFixture.shell(
                    """
                    set -e
                    ip netns add \(namespace)
                    ip link add \(hostInterface) type veth peer name \(peer)
                    ip link set \(peer) netns \(namespace)
                    ip addr add \(net).1/24 dev \(hostInterface)
                    ip link set \(hostInterface) up
                    ip netns exec \(namespace) ip addr add \(net).2/24 dev \(peer)
                    ip netns exec \(namespace) ip link set \(peer) up
                    ip netns exec \(namespace) ip link set lo up
                    ip route add unreachable \(net).0/24 metric 4000
                    """
                )
                chosen = ("\(net).0/24", "\(net).2")
            } catch {
                failures.append("\(error)")
                // What this attempt created (never the route: if adding it failed, it is another's).
                _ = try? NginxFixture.shell("ip link del \(hostInterface) 2>/dev/null; ip netns del \(namespace) 2>/dev/null; true")
                if failures.count >= 5 { break }
            }
        }
        guard let chosen else {
            throw NginxFixture.FixtureError(message: "no network lab could be set up:\n" + failures.joined(separator: "\n"))
        }
        (subnetRoute, serverAddress) = chosen
        do {
            server = try Subprocess.spawn(
                "exec ip netns exec \(namespace) /usr/bin/python3 -m http.server \(port) --bind \(serverAddress)"
            )
        } catch {
            _ = try? NginxFixture.shell(Self.removal(route: subnetRoute, interface: hostInterface, namespace: namespace))
            throw error
        }
    }

    /// Removes a lab's route, veth pair and namespace.
    private static func removal(route: String, interface: String, namespace: String) -> String {
        "ip route del unreachable \(route) metric 4000 2>/dev/null; ip link del \(interface) 2>/dev/null; ip netns del \(namespace) 2>/dev/null; true"
    }

    /// The labs of test processes that were killed before their tear-down (a run stopped by its
    /// bound, a developer's ^C): their namespaces and veth pairs, and `unreachable` routes that no
    /// address of the machine is in (a live lab adds its address before its route, and removes its
    /// route first).
    private static func removeAbandonedLabs() {
        _ = try? NginxFixture.shell(
            """
            for ns in $(ip netns list | awk '{print $1}' | grep -E '^brick-ns-[0-9]+$'); do
                pid=${ns#brick-ns-}
                [ -d /proc/$pid ] && continue
                ip link del bkc$((pid % 100000)) 2>/dev/null; ip netns del $ns 2>/dev/null
            done
            for net in $(ip route show type unreachable | awk '$0 ~ /metric 4000/ && $2 ~ /^10\\.213\\./ {print $2}'); do
                [ -z "$(ip -o -4 addr show to $net)" ] && ip route del unreachable $net metric 4000 2>/dev/null
            done
            true
            """
        )
    }

    func link(up: Bool) throws {
        try NginxFixture.shell("ip link set \(hostInterface) \(up ? "up" : "down")")
    }

    func tearDown() {
        kill(server, SIGKILL)
        _ = Subprocess.wait(server)
        _ = try? NginxFixture.shell(Self.removal(route: subnetRoute, interface: hostInterface, namespace: namespace))
    }
}

/// Counts the attempts that reach the transport.
final class CountingTransport: Transport {
    let inner: any Transport
    let attempts = Lock(0)
    /// Every failed attempt, for the failure messages.
    let failures = Lock<[String]>([])
    init(_ inner: any Transport) { self.inner = inner }
    func networkDidChange() { inner.networkDidChange() }
    func start(
        _ request: TransportRequest,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) -> TransportTask {
        attempts.withLock { $0 += 1 }
        return inner.start(request) { result in
            if case .failure(let error) = result { self.failures.withLock { $0.append("\(error)") } }
            completion(result)
        }
    }
}

final class LabGet: Component, GETRequestType, ValidatedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    var autoRetryConfiguration: AutoRetryConfiguration {
        AutoRetryConfiguration(breakTime: .milliseconds(200), maxRetryCount: 2)
    }
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

@Suite(
    "Reachability in a real network namespace",
    .serialized,
    .timeLimit(.minutes(5)),
    .enabled(if: VethLab.unavailableReason == nil, "\(VethLab.unavailableReason ?? "")")
)
struct NamespaceReachabilityTests {
    @Test("link down: the request parks without spending attempts; link up: it succeeds; 20 flaps lose nothing")
    func parkAndRelease() async throws {
        let lab = try VethLab()
        defer { lab.tearDown() }
        let reachability = try NetlinkReachability()
        let transport = CountingTransport(CurlTransport())
        let session = Session(transport: transport, reachability: reachability)
        let url = "http://\(lab.serverAddress):\(lab.port)/"

        // The server inside the namespace is up.
        var ready = false
        for _ in 0..<100 where !ready {
            ready = (try? await CurlTransport().send(try TransportRequest(method: .get, url: url)))?.status == .ok
            if !ready { try await Task.sleep(for: .milliseconds(50)) }
        }
        try #require(ready, "the namespace's HTTP server did not come up")
        #expect(reachability.status(for: lab.serverAddress) == .reachable)

        var recoveries: [Duration] = []
        for flap in 1...20 {
            try lab.link(up: false)
            #expect(reachability.status(for: lab.serverAddress) == .unreachable, "flap \(flap)")
            let before = transport.attempts.withLock { $0 }
            let task = Task { await LabGet(url, session: session).response() }
            // The first attempt fails at once (no route) and the request parks. Watch for 300 ms of
            // real time (an observation window, not a timing assertion): no further attempt is made.
            try await Task.sleep(for: .milliseconds(300))
            #expect(transport.attempts.withLock { $0 } - before == 1, "flap \(flap): attempts while the link was down")
            let upAt = ContinuousClock.now
            try lab.link(up: true)
            let response = await task.childValue
            recoveries.append(ContinuousClock.now - upAt)
            #expect(response.status == .ok, "flap \(flap): \(String(describing: response.error))")
            #expect(
                response.retryCount == 0,
                "flap \(flap): parking spends no attempt; failed attempts: \(transport.failures.withLock { $0.suffix(3) })"
            )
        }
        let sorted = recoveries.sorted()
        let p95 = sorted[max(0, Int((Double(sorted.count) * 0.95).rounded(.up)) - 1)]
        print(
            "namespace reachability: 20 flaps, p95 time from `ip link set up` to success = \(p95), max = \(sorted.last!)"
        )
        #expect(recoveries.count == 20)
    }

    @Test("links that carry no routes coming and going are not changes; a new route is")
    func unrelatedLinks() async throws {
        // In a network namespace of its own: the other tests' namespaces, veth pairs and routes
        // change the machine's namespace while this one runs.
        let namespace = "brick-links-\(getpid())"
        try NginxFixture.shell("ip netns add \(namespace)")
        defer { _ = try? NginxFixture.shell("ip netns del \(namespace)") }
        let inside = "ip netns exec \(namespace)"
        let reachability = try Self.monitor(in: namespace)
        let judgements = reachability.judgements
        let notifications = Lock(0)
        let changes = reachability.changes()
        let listener = Task {
            for await _ in changes { notifications.withLock { $0 += 1 } }
        }
        defer { listener.cancel() }
        // A veth pair with no addresses, like a container's: its links come up, then IPv6 gives
        // each end a link-local address (tentative until duplicate detection ends, ~1 s later).
        try NginxFixture.shell("\(inside) ip link add bkv type veth peer name bkvp && \(inside) ip link set bkv up")
        try NginxFixture.shell("\(inside) ip link set bkvp up")
        await eventually {
            let state = try? NginxFixture.shell(
                "\(inside) sh -c 'cat /sys/class/net/bkv/operstate /sys/class/net/bkvp/operstate /proc/net/if_inet6'"
            )
            return state.map { Self.settled($0, interfaces: ["bkv", "bkvp"]) } ?? false
        }
        // A barrier instead of a quiet period: one more event that is no change (an alias), sent
        // after `mark`; once the monitor has judged what it read after `mark`, it has judged every
        // event of the pair's coming up, and none of them may have been a change.
        let mark = BurstJudgements.monotonicNanoseconds()
        try NginxFixture.shell("\(inside) ip link set bkv alias brick-barrier")
        await eventually { judgements.readThrough.load(ordering: .acquiring) >= mark }
        #expect(judgements.changes.load(ordering: .relaxed) == 0)
        // A route of its own is a change, and subscribers hear of it.
        try NginxFixture.shell("\(inside) ip addr add 10.214.0.1/24 dev bkv")
        await eventually { judgements.changes.load(ordering: .relaxed) >= 1 }
        await eventually { notifications.withLock { $0 } >= 1 }
    }

    /// A monitor of network namespace `namespace`: made on a thread of its own that enters it (a
    /// thread's network namespace is its own), so the monitor's socket and thread, started from
    /// there, watch that namespace.
    private static func monitor(in namespace: String) throws -> NetlinkReachability {
        let made = Lock<Result<NetlinkReachability, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            let descriptor = open("/var/run/netns/\(namespace)", O_RDONLY)
            defer { if descriptor >= 0 { close(descriptor) } }
            // glibc's setns(2), which its Swift module does not declare (_GNU_SOURCE only).
            typealias SetNamespace = @convention(c) (Int32, Int32) -> Int32
            let clone_newnet: Int32 = 0x4000_0000  // CLONE_NEWNET
            guard descriptor >= 0, let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setns"),
                unsafeBitCast(symbol, to: SetNamespace.self)(descriptor, clone_newnet) == 0
            else {
                let error = NginxFixture.FixtureError(message: "cannot enter network namespace \(namespace): errno \(errno)")
                made.withLock { $0 = .failure(error) }
                return
            }
            made.withLock { $0 = Result { try NetlinkReachability(debounce: .milliseconds(20)) } }
        }
        thread.start()
        done.wait()
        return try made.withLock { $0 }!.get()
    }

    /// Whether `state` (each interface's operstate, then /proc/net/if_inet6) says every one of
    /// `interfaces` is up with its IPv6 link-local address out of duplicate detection: every event
    /// of its coming up was sent. if_inet6's fields: address, index, prefix length, scope (0x20:
    /// link), flags (0x40: tentative), name.
    private static func settled(_ state: String, interfaces: [String]) -> Bool {
        let lines = state.split(separator: "\n")
        guard lines.count >= interfaces.count, lines.prefix(interfaces.count).allSatisfy({ $0 == "up" }) else {
            return false
        }
        return interfaces.allSatisfy { interface in
            lines.dropFirst(interfaces.count).contains { line in
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count == 6, fields[5] == interface, fields[3] == "20",
                    let flags = Int(fields[4], radix: 16)
                else { return false }
                return flags & 0x40 == 0
            }
        }
    }
}
