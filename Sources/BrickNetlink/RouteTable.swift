internal import CNetlink
import FoundationEssentials
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Route and link queries: "is there a route to this address through an interface that is up and
/// running?"
enum RouteTable {
    /// Whether the kernel routes `address` (4 or 16 bytes) through an interface that is up and running.
    static func isRoutable(_ address: [UInt8]) -> Bool {
        guard let socket = try? NetlinkSocket() else { return true }  // cannot ask: never block sending
        let family = address.count == 4 ? AF_INET : AF_INET6
        var route = rtmsg()
        route.rtm_family = UInt8(family)
        route.rtm_dst_len = UInt8(address.count * 8)
        var payload = withUnsafeBytes(of: route) { Array($0) }
        payload += [UInt8](repeating: 0, count: Int(cnetlink_nlmsg_align(Int32(payload.count))) - payload.count)
        var attribute = rtattr()
        attribute.rta_len = UInt16(cnetlink_rta_length(Int32(address.count)))
        attribute.rta_type = UInt16(RTA_DST.rawValue)
        payload += withUnsafeBytes(of: attribute) { Array($0) } + address
        payload += [UInt8](repeating: 0, count: Int(cnetlink_nlmsg_align(Int32(payload.count))) - payload.count)
        let replies = socket.request(type: UInt16(RTM_GETROUTE), flags: NLM_F_REQUEST, payload: payload)
        guard let reply = replies.first(where: { $0.type == UInt16(RTM_NEWROUTE) }) else { return false }
        return reply.payload.withUnsafeBytes { raw -> Bool in
            guard raw.count >= MemoryLayout<rtmsg>.size else { return false }
            let message = raw.load(as: rtmsg.self)
            switch Int32(message.rtm_type) {
            case Int32(RTN_UNICAST), Int32(RTN_LOCAL): break
            default: return false  // unreachable, blackhole, prohibit
            }
            var outputInterface: Int32 = 0
            forEachRouteAttribute(raw) { type, value in
                if type == UInt16(RTA_OIF.rawValue) && value.count >= 4 {
                    outputInterface = value.loadUnaligned(as: Int32.self)
                }
            }
            return outputInterface != 0 && isUpAndRunning(interface: outputInterface, socket: socket)
        }
    }

    /// Calls `body` with the type and value bytes of each attribute after a route message's `rtmsg`.
    static func forEachRouteAttribute(
        _ message: UnsafeRawBufferPointer,
        _ body: (_ type: UInt16, _ value: UnsafeRawBufferPointer) -> Void
    ) {
        let headerSize = Int(cnetlink_rta_length(0))
        var offset = Int(cnetlink_nlmsg_align(Int32(MemoryLayout<rtmsg>.size)))
        while offset + MemoryLayout<rtattr>.size <= message.count {
            let attribute = message.load(fromByteOffset: offset, as: rtattr.self)
            let length = Int(attribute.rta_len)
            guard length >= headerSize, offset + length <= message.count else { break }
            body(
                attribute.rta_type,
                UnsafeRawBufferPointer(rebasing: message[(offset + headerSize)..<(offset + length)])
            )
            offset += Int(cnetlink_rta_space(Int32(length - headerSize)))
        }
    }

    /// Whether interface `index` is up and running (a loopback interface only needs to be up).
    static func isUpAndRunning(interface index: Int32, socket: NetlinkSocket) -> Bool {
        var link = ifinfomsg()
        link.ifi_family = UInt8(AF_UNSPEC)
        link.ifi_index = index
        let payload = withUnsafeBytes(of: link) { Array($0) }
        let replies = socket.request(type: UInt16(RTM_GETLINK), flags: NLM_F_REQUEST, payload: payload)
        guard let reply = replies.first(where: { $0.type == UInt16(RTM_NEWLINK) }),
            reply.payload.count >= MemoryLayout<ifinfomsg>.size
        else { return false }
        return isUsable(flags: reply.payload.withUnsafeBytes { $0.load(as: ifinfomsg.self).ifi_flags })
    }

    /// Whether interface flags say up and running (a loopback interface only needs to be up).
    static func isUsable(flags: UInt32) -> Bool {
        let up = flags & UInt32(IFF_UP.rawValue) != 0
        let running = flags & UInt32(IFF_RUNNING.rawValue) != 0
        let loopback = flags & UInt32(IFF_LOOPBACK.rawValue) != 0
        return up && (running || loopback)
    }
}

/// What the routing state looks like, reduced to what decides where traffic goes: every route
/// (family, table, type, destination, gateway, output interface, preferred source, metric) with
/// whether its interface is usable. Two fingerprints differ when a connection's path may have
/// changed; an interface coming or going without routes of its own (a container's veth, say) or
/// IPv6 link-local and multicast bookkeeping leave it unchanged.
package struct RouteFingerprint: Equatable, Sendable {
    /// One route, as two fingerprints compare it.
    package struct Route: Hashable, Sendable {
        var family: UInt8
        var table: UInt8
        var type: UInt8
        var destinationLength: UInt8
        var destination: [UInt8]
        var gateway: [UInt8]
        var preferredSource: [UInt8]
        var outputInterface: Int32
        var metric: UInt32
        var interfaceUsable: Bool
    }

    var routes: Set<Route>

    /// Reads the kernel's routes and links now; `nil` when netlink cannot be asked.
    static func current() -> RouteFingerprint? {
        guard let socket = try? NetlinkSocket() else { return nil }
        let usable = usableInterfaces(socket)
        var header = rtmsg()
        header.rtm_family = UInt8(AF_UNSPEC)
        let payload = withUnsafeBytes(of: header) { Array($0) }
        var routes = Set<Route>()
        for reply in socket.request(type: UInt16(RTM_GETROUTE), flags: cnetlink_dump_flags(), payload: payload)
        where reply.type == UInt16(RTM_NEWROUTE) {
            if let route = route(from: reply.payload, usable: usable) { routes.insert(route) }
        }
        return RouteFingerprint(routes: routes)
    }

    /// The route a `RTM_NEWROUTE` payload describes (`rtmsg` and its attributes), or `nil` for a
    /// route that never carries a connection to a remote host (broadcast, multicast, link-local).
    package static func route(from payload: [UInt8], usable: Set<Int32>) -> Route? {
        payload.withUnsafeBytes { raw -> Route? in
            guard raw.count >= MemoryLayout<rtmsg>.size else { return nil }
            let message = raw.load(as: rtmsg.self)
            switch Int32(message.rtm_type) {
            case Int32(RTN_BROADCAST), Int32(RTN_MULTICAST), Int32(RTN_ANYCAST): return nil
            default: break
            }
            var route = Route(
                family: message.rtm_family,
                table: message.rtm_table,
                type: message.rtm_type,
                destinationLength: message.rtm_dst_len,
                destination: [],
                gateway: [],
                preferredSource: [],
                outputInterface: 0,
                metric: 0,
                interfaceUsable: false
            )
            RouteTable.forEachRouteAttribute(raw) { type, value in
                switch type {
                case UInt16(RTA_DST.rawValue): route.destination = Array(value)
                case UInt16(RTA_GATEWAY.rawValue): route.gateway = Array(value)
                case UInt16(RTA_PREFSRC.rawValue): route.preferredSource = Array(value)
                case UInt16(RTA_OIF.rawValue) where value.count >= 4:
                    route.outputInterface = value.loadUnaligned(as: Int32.self)
                case UInt16(RTA_PRIORITY.rawValue) where value.count >= 4:
                    route.metric = value.loadUnaligned(as: UInt32.self)
                default: break
                }
            }
            // IPv6 link-local (fe80::/10) and multicast (ff00::/8) routes come and go with every
            // interface and never carry a connection to a remote host.
            if route.family == UInt8(AF_INET6), let first = route.destination.first {
                if first == 0xFF { return nil }
                if first == 0xFE && route.destination.count > 1 && route.destination[1] & 0xC0 == 0x80 { return nil }
            }
            route.interfaceUsable = usable.contains(route.outputInterface)
            return route
        }
    }

    /// Indexes of the interfaces that are up and running (loopback: up).
    private static func usableInterfaces(_ socket: NetlinkSocket) -> Set<Int32> {
        var link = ifinfomsg()
        link.ifi_family = UInt8(AF_UNSPEC)
        let payload = withUnsafeBytes(of: link) { Array($0) }
        var usable = Set<Int32>()
        for reply in socket.request(type: UInt16(RTM_GETLINK), flags: cnetlink_dump_flags(), payload: payload)
        where reply.type == UInt16(RTM_NEWLINK) && reply.payload.count >= MemoryLayout<ifinfomsg>.size {
            let message = reply.payload.withUnsafeBytes { $0.load(as: ifinfomsg.self) }
            if RouteTable.isUsable(flags: message.ifi_flags) { usable.insert(message.ifi_index) }
        }
        return usable
    }
}
