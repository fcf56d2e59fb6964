import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// A file descriptor that closes itself: when it is replaced, closed, or its owner goes away.
struct FileDescriptor: ~Copyable {
    /// The descriptor, or -1 when closed.
    private(set) var raw: Int32

    /// None (closed).
    init() { raw = -1 }

    /// Takes ownership of `raw` (a negative value is none).
    init(_ raw: Int32) { self.raw = raw }

    var isOpen: Bool { raw >= 0 }

    /// Closes it now (nothing when it is not open).
    mutating func close() {
        if raw >= 0 { _ = Glibc.close(raw) }
        raw = -1
    }

    deinit {
        if raw >= 0 { _ = Glibc.close(raw) }
    }
}
