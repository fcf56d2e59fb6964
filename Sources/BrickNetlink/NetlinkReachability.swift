internal import CNetlink
import FoundationEssentials
import Glibc
#if canImport(SwiftOverlayShims)
// `timespec`'s fields can resolve to the standard library's copy of the C declaration, depending
// on build order (as in SessionClock.swift): imported, so `tv_sec` is visible either way.
import SwiftOverlayShims
#endif
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Reachability from the Linux kernel: a `NETLINK_ROUTE` socket subscribed to link, address and
/// IPv4/IPv6 route changes.
///
/// A destination is reachable when the kernel has a route to it through an interface that is up
/// *and running* (loopback only needs to be up). The kernel does not announce everything: a link
/// going down removes its IPv4 routes without a route-deleted message, and a link comes back in two
/// steps (up, then running). So the monitor does not track individual events: after each burst of
/// events (quiet for ``debounce``), it reads the routes and the state of their interfaces again, and
/// notifies subscribers, who ask the kernel again, when that changed. An interface with no routes of
/// its own coming or going (a container's veth) and IPv6 link-local bookkeeping are not changes.
///
/// For a host *name* the monitor cannot know the address without DNS, so it answers whether there
/// is a usable default route (IPv4 or IPv6). Lookups send no packets: they only query the routing
/// table.
public final class NetlinkReachability: ReachabilityMonitor {
    private let subscribers = ReachabilityChanges()
    private let stopPipe: (read: Int32, write: Int32)
    /// How long the kernel must be quiet before subscribers are told about a burst of changes.
    public let debounce: Duration

    /// What the monitor thread decided so far (for tests, which wait for a decision instead of
    /// sleeping through a silence).
    package let judgements = BurstJudgements()

    /// One monitor for the process, used by sessions that are not given one; `nil` where netlink is
    /// unavailable.
    public static let shared: NetlinkReachability? = try? NetlinkReachability()

    /// Opens the netlink socket and starts the monitor thread.
    ///
    /// - Parameter debounce: The quiet time that ends a burst of events. Default 50 ms.
    /// - Throws: ``NetlinkError`` when the socket cannot be opened (for example in a sandbox
    ///   without netlink).
    public init(debounce: Duration = .milliseconds(50)) throws(NetlinkError) {
        self.debounce = debounce
        let monitor = try NetlinkSocket(groups: cnetlink_route_groups())
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw NetlinkError(operation: "pipe", errno: errno) }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        stopPipe = (fds[0], fds[1])
        let (subscribers, judgements) = (self.subscribers, self.judgements)
        let stop = fds[0]
        let quiet = Int32(max(1, debounce.milliseconds(atMost: Int(Int32.max))))
        // The socket is handed to the monitor thread and used only there from now on.
        nonisolated(unsafe) let owned = monitor
        let startError = DetachedThread.start(name: "brick-netlink") {
            Self.run(monitor: owned, stop: stop, quietMilliseconds: quiet, subscribers: subscribers, judgements: judgements)
        }
        guard startError == 0 else {
            // The read end was the thread's; the write end is closed by deinit.
            close(stop)
            throw NetlinkError(operation: "pthread_create", errno: startError)
        }
    }

    deinit {
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
        close(stopPipe.write)
    }

    /// Whether `host` is reachable now: an IP literal is looked up in the routing table; a name is
    /// reachable when a default route through a running interface exists.
    public func status(for host: String) -> ReachabilityStatus {
        if let address = Self.address(host) {
            return RouteTable.isRoutable(address) ? .reachable : .unreachable
        }
        // 192.0.2.1 and 2001:db8::1 are documentation addresses: only the default route leads there.
        let defaultRoute =
            RouteTable.isRoutable([192, 0, 2, 1])
            || RouteTable.isRoutable([0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1])
        return defaultRoute ? .reachable : .unreachable
    }

    /// A subscription to bursts of routing changes.
    public func changes() -> AsyncStream<Void> {
        subscribers.subscribe()
    }

    static func address(_ host: String) -> [UInt8]? {
        var host = host
        if host == "localhost" { host = "127.0.0.1" }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }

    /// The monitor loop: wait for events; once `quietMilliseconds` pass without one, notify.
    private static func run(
        monitor: NetlinkSocket,
        stop: Int32,
        quietMilliseconds: Int32,
        subscribers: ReachabilityChanges,
        judgements: BurstJudgements
    ) {
        defer { close(stop) }
        var pending = false
        /// When the socket was last found empty (monotonic nanoseconds).
        var readThrough: UInt64 = 0
        var fingerprint = RouteFingerprint.current()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            var fds = [
                pollfd(fd: monitor.descriptor, events: Int16(POLLIN), revents: 0),
                pollfd(fd: stop, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, pending ? quietMilliseconds : -1)
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            if fds[1].revents != 0 { return }
            if ready == 0 {
                pending = false
                // Only a burst that changed the routes (or the state of an interface they use) is
                // news: links without routes of their own come and go on busy hosts.
                let now = RouteFingerprint.current()
                if now == nil || now != fingerprint {
                    judgements.changes.add(1, ordering: .relaxed)
                    subscribers.notify()
                }
                fingerprint = now
                judgements.readThrough.store(readThrough, ordering: .releasing)
                continue
            }
            if fds[0].revents & Int16(POLLIN) != 0 {
                // Drain the burst; the contents do not matter, the routes are read again afterwards.
                while buffer.withUnsafeMutableBytes({
                    recv(monitor.descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT))
                }) > 0 {}
                readThrough = BurstJudgements.monotonicNanoseconds()
                pending = true
            } else if fds[0].revents != 0 {
                return
            }
        }
    }
}

/// The monitor thread's decisions: a test that must show a burst was *not* a change waits until
/// the monitor has judged every event queued before a point in time (``readThrough``), then reads
/// ``changes`` — an event to wait for, instead of a quiet period to sleep through.
package final class BurstJudgements: Sendable {
    /// Bursts judged to be changes (each notified the subscribers). Counted before
    /// ``readThrough`` moves: reading that first (acquiring), then this, sees every change judged
    /// with it.
    package let changes = Atomic<Int>(0)
    /// `CLOCK_MONOTONIC` nanoseconds at which the socket was last found empty before the latest
    /// judgement: every event the kernel queued before then has been judged.
    package let readThrough = Atomic<UInt64>(0)

    /// `CLOCK_MONOTONIC` now, in nanoseconds (the clock of ``readThrough``).
    package static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
