import Glibc

/// Connection limits derived from the process's resources: pure arithmetic, tested by a table.
package enum ConnectionLimits {
    /// Descriptors left to the rest of the process (standard streams, the driver's wakeup pipe,
    /// netlink, Dispatch, files the program opens) before the connection limit is worked out.
    package static let reservedDescriptors: UInt64 = 24

    /// The default total connection limit for a soft `RLIMIT_NOFILE` of `openFileLimit`: half of
    /// what is left after ``reservedDescriptors`` (the other half covers the resolver's socket
    /// pairs and connections being closed while new ones open), at most 256, at least 2.
    package static func defaultTotal(openFileLimit: UInt64) -> Int {
        let spare = openFileLimit > reservedDescriptors ? openFileLimit - reservedDescriptors : 0
        return Int(min(max(spare / 2, 2), 256))
    }
}
