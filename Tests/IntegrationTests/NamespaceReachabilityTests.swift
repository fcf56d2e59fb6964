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
        let id = getpid() % 200 + 20
        namespace = "brick-ns-\(getpid())"
        hostInterface = "bkc\(getpid() % 100_000)"
        let peer = "bks\(getpid() % 100_000)"
        serverAddress = "10.213.\(id).2"
        try NginxFixture.shell(
            """
            set -e
            ip netns add \(namespace)
            ip link add \(hostInterface) type veth peer name \(peer)
            ip link set \(peer) netns \(namespace)
            ip addr add 10.213.\(id).1/24 dev \(hostInterface)
            ip link set \(hostInterface) up
            ip netns exec \(namespace) ip addr add \(serverAddress)/24 dev \(peer)
            ip netns exec \(namespace) ip link set \(peer) up
            ip netns exec \(namespace) ip link set lo up
            ip route add unreachable 10.213.\(id).0/24 metric 4000
            """
        )
        subnetRoute = "10.213.\(id).0/24"
        server = try Subprocess.spawn(
            "exec ip netns exec \(namespace) /usr/bin/python3 -m http.server \(port) --bind \(serverAddress)"
        )
    }

    func link(up: Bool) throws {
        try NginxFixture.shell("ip link set \(hostInterface) \(up ? "up" : "down")")
    }

    func tearDown() {
        kill(server, SIGKILL)
        _ = Subprocess.wait(server)
        _ = try? NginxFixture.shell(
            "ip route del unreachable \(subnetRoute) metric 4000 2>/dev/null; ip link del \(hostInterface) 2>/dev/null; ip netns del \(namespace)"
        )
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
        let reachability = try NetlinkReachability(debounce: .milliseconds(20))
        let notifications = Lock(0)
        let changes = reachability.changes()
        let listener = Task {
            for await _ in changes { notifications.withLock { $0 += 1 } }
        }
        defer { listener.cancel() }
        let name = "bkv\(getpid() % 100_000)"
        defer { _ = try? NginxFixture.shell("ip link del \(name) 2>/dev/null") }
        // A veth pair with no addresses, like a container's: only IPv6 link-local bookkeeping.
        try NginxFixture.shell("ip link add \(name) type veth peer name \(name)p && ip link set \(name) up")
        try NginxFixture.shell("ip link set \(name)p up")
        // An observation window, not a timing assertion: 20 ms debounce, 500 ms of quiet.
        try await Task.sleep(for: .milliseconds(500))
        #expect(notifications.withLock { $0 } == 0)
        try NginxFixture.shell("ip addr add 10.214.\(getpid() % 200 + 20).1/24 dev \(name)")
        for _ in 0..<500 where notifications.withLock({ $0 }) == 0 {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(notifications.withLock { $0 } >= 1)
    }
}
