internal import CNetlink
import FoundationEssentials
import Glibc

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
