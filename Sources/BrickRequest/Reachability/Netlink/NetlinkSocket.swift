internal import CNetlink
import Foundation

/// A `NETLINK_ROUTE` socket for one request/response exchange with the kernel's routing tables.
/// Used on the calling thread only, and closed when released.
final class NetlinkSocket {
    let descriptor: Int32
    private var sequence: UInt32 = 0

    /// Opens a socket; `groups` subscribes it to multicast notifications.
    init(groups: UInt32 = 0) throws(NetlinkError) {
        descriptor = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), NETLINK_ROUTE)
        guard descriptor >= 0 else { throw NetlinkError(operation: "socket(AF_NETLINK)", errno: errno) }
        var address = sockaddr_nl()
        address.nl_family = sa_family_t(AF_NETLINK)
        address.nl_groups = groups
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_nl>.size))
            }
        }
        guard bound == 0 else {
            let code = errno
            close(descriptor)
            throw NetlinkError(operation: "bind(AF_NETLINK)", errno: code)
        }
    }

    deinit {
        close(descriptor)
    }

    /// Sends one request (`header` type and flags, then `payload`) and returns the reply messages
    /// as `(type, payload bytes, error)`, where error is the `NLMSG_ERROR` code (0 for an ack).
    func request(type: UInt16, flags: Int32, payload: [UInt8]) -> [(type: UInt16, payload: [UInt8], error: Int32)] {
        sequence &+= 1
        let headerLength = Int(cnetlink_nlmsg_length(0))
        var message = [UInt8](repeating: 0, count: Int(cnetlink_nlmsg_align(Int32(headerLength + payload.count))))
        message.withUnsafeMutableBytes { bytes in
            var header = nlmsghdr()
            header.nlmsg_len = UInt32(headerLength + payload.count)
            header.nlmsg_type = type
            header.nlmsg_flags = UInt16(flags)
            header.nlmsg_seq = sequence
            bytes.storeBytes(of: header, as: nlmsghdr.self)
            for (index, byte) in payload.enumerated() { bytes[headerLength + index] = byte }
        }
        let sent = message.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, 0) }
        guard sent == message.count else { return [] }
        var replies: [(type: UInt16, payload: [UInt8], error: Int32)] = []
        var buffer = [UInt8](repeating: 0, count: 32 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return replies }
            var done = false
            buffer.withUnsafeMutableBytes { raw in
                var remaining = Int32(count)
                var header = raw.baseAddress!.assumingMemoryBound(to: nlmsghdr.self)
                while cnetlink_nlmsg_ok(header, remaining) != 0 {
                    defer { header = cnetlink_nlmsg_next(header, &remaining) }
                    guard header.pointee.nlmsg_seq == sequence else { continue }
                    let payloadLength = Int(header.pointee.nlmsg_len) - headerLength
                    let data = cnetlink_nlmsg_data(header)!
                    let bytes = Array(UnsafeRawBufferPointer(start: data, count: max(0, payloadLength)))
                    switch Int32(header.pointee.nlmsg_type) {
                    case NLMSG_DONE:
                        done = true
                    case NLMSG_ERROR:
                        let error = data.load(as: Int32.self)
                        replies.append((header.pointee.nlmsg_type, bytes, error))
                        done = true
                    default:
                        replies.append((header.pointee.nlmsg_type, bytes, 0))
                        if Int32(header.pointee.nlmsg_flags) & NLM_F_MULTI == 0 { done = true }
                    }
                }
            }
            if done { return replies }
        }
    }
}

/// A netlink system call failed.
public struct NetlinkError: Error, Sendable, CustomStringConvertible {
    /// The call that failed.
    public let operation: String
    /// Its `errno`.
    public let errno: Int32

    /// `operation failed: strerror(errno)`.
    public var description: String { "\(operation) failed: \(String(cString: strerror(errno)))" }
}

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
            var offset = Int(cnetlink_nlmsg_align(Int32(MemoryLayout<rtmsg>.size)))
            while offset + MemoryLayout<rtattr>.size <= raw.count {
                let attribute = raw.load(fromByteOffset: offset, as: rtattr.self)
                let length = Int(attribute.rta_len)
                guard length >= MemoryLayout<rtattr>.size else { break }
                if attribute.rta_type == UInt16(RTA_OIF.rawValue) {
                    outputInterface = raw.load(fromByteOffset: offset + Int(cnetlink_rta_length(0)), as: Int32.self)
                }
                offset += Int(cnetlink_rta_space(Int32(length - Int(cnetlink_rta_length(0)))))
            }
            return outputInterface != 0 && isUpAndRunning(interface: outputInterface, socket: socket)
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
        let flags = reply.payload.withUnsafeBytes { $0.load(as: ifinfomsg.self).ifi_flags }
        let up = flags & UInt32(IFF_UP.rawValue) != 0
        let running = flags & UInt32(IFF_RUNNING.rawValue) != 0
        let loopback = flags & UInt32(IFF_LOOPBACK.rawValue) != 0
        return up && (running || loopback)
    }
}
