internal import CNetlink
import FoundationEssentials
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

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
    func request(type: UInt16, flags: Int32, payload: [UInt8]) -> [NetlinkMessages.Reply] {
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
        var replies: [NetlinkMessages.Reply] = []
        var buffer = [UInt8](repeating: 0, count: 32 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return replies }
            let done = buffer.withUnsafeBytes { raw in
                NetlinkMessages.read(UnsafeRawBufferPointer(rebasing: raw[0..<count]), sequence: sequence, into: &replies)
            }
            if done { return replies }
        }
    }
}
