internal import CNetlink
import FoundationEssentials
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// A netlink system call failed.
public struct NetlinkError: Error, Sendable, CustomStringConvertible {
    /// The call that failed.
    public let operation: String
    /// Its `errno`.
    public let errno: Int32

    /// `operation failed: strerror(errno)`.
    public var description: String { "\(operation) failed: \(String(cString: strerror(errno)))" }
}
