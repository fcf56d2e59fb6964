internal import CNetlink
import FoundationEssentials
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The messages of one netlink datagram (RFC 3549 §2.3.2): a pure reader, no socket, so that any
/// bytes can be fed to it (the fuzzer does).
package enum NetlinkMessages {
    /// A reply: its type, its payload and, for `NLMSG_ERROR`, the error code (0 for an ack).
    package typealias Reply = (type: UInt16, payload: [UInt8], error: Int32)

    /// The size of `nlmsghdr`: length (4), type (2), flags (2), sequence (4), port (4).
    private static let headerSize = 16

    /// Appends the replies to request `sequence` in `datagram` (messages of other sequences are
    /// skipped) and returns whether the reply is complete: `NLMSG_DONE`, an error or ack, or a
    /// message that is not part of a multipart reply. A message whose length is impossible ends
    /// the datagram.
    package static func read(_ datagram: UnsafeRawBufferPointer, sequence: UInt32, into replies: inout [Reply]) -> Bool {
        var done = false
        var offset = 0
        while datagram.count - offset >= headerSize {
            let length = Int(datagram.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            guard length >= headerSize, length <= datagram.count - offset else { break }
            let type = datagram.loadUnaligned(fromByteOffset: offset + 4, as: UInt16.self)
            let flags = datagram.loadUnaligned(fromByteOffset: offset + 6, as: UInt16.self)
            let messageSequence = datagram.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            if messageSequence == sequence {
                let payload = UnsafeRawBufferPointer(rebasing: datagram[(offset + headerSize)..<(offset + length)])
                switch Int32(type) {
                case NLMSG_DONE:
                    done = true
                case NLMSG_ERROR:
                    // A truncated error message still ends the reply, as a failure.
                    let error = payload.count >= 4 ? payload.loadUnaligned(as: Int32.self) : -EPROTO
                    replies.append((type, Array(payload), error))
                    done = true
                default:
                    replies.append((type, Array(payload), 0))
                    if Int32(flags) & NLM_F_MULTI == 0 { done = true }
                }
            }
            // NLMSG_ALIGN: messages start on 4-byte boundaries.
            offset += (length + 3) & ~3
        }
        return done
    }
}
