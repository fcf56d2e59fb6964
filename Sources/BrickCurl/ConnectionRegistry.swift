import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The sockets libcurl opened through a ``CurlDriver``, found again by their connection's
/// addresses, so that a connection about to carry another request can be checked for bytes that
/// nobody asked for.
///
/// **Why.** An HTTP/1.1 server that sends more than the response it owes (a body after a `204` or
/// `304`, a body after a `HEAD` response, an unsolicited response on an idle connection) leaves
/// bytes in the socket once the response is complete. libcurl 7.88 reuses such a connection, and
/// those bytes become the *next* request's response, then every later one shifts by one (a
/// desync: a response delivered to a request it does not answer). Before a request goes out on a
/// reused connection (`CURLOPT_PREREQFUNCTION`), the driver polls its socket: readable means
/// leftover bytes (or the peer's close), and the request is started again on a new connection.
///
/// libcurl's prerequest callback names the connection only by its addresses (its socket is not
/// available there in 7.88), so sockets are recorded as libcurl opens them
/// (`CURLOPT_OPENSOCKETFUNCTION`) and keyed by their addresses the first time a request is sent on
/// them. Touched only by the driver's lease holder.
///
/// Not checked: HTTP/2 connections (frames arrive on them unasked: settings, pings, other streams),
/// bytes already read into TLS buffers (they are not visible to `poll`), and Unix domain sockets
/// (no addresses to key them by).
struct ConnectionRegistry {
    /// One connection's socket, and what is known of its protocol.
    struct Connection {
        var socket: Int32
        /// Whether it carries HTTP/2 streams: `nil` until a response on it completed.
        var multiplexed: Bool?
    }

    /// Sockets opened and not yet keyed.
    private var unkeyed: [Int32] = []
    private var connections: [UInt64: Connection] = [:]
    private var keys: [Int32: UInt64] = [:]

    /// How many sockets are open (for tests and diagnostics).
    var openCount: Int { unkeyed.count + keys.count }

    /// The destination (host, port) of each open socket, for ``openCounts``.
    private var destinations: [Int32: Destination] = [:]

    /// A connection's destination, as the request that opened it named it.
    struct Destination: Hashable {
        var host: String
        var port: Int
    }

    /// Open sockets by destination.
    var openCounts: [Destination: Int] {
        var counts: [Destination: Int] = [:]
        for destination in destinations.values { counts[destination, default: 0] += 1 }
        return counts
    }

    /// libcurl opened `socket` for a request to `destination`.
    mutating func opened(_ socket: Int32, to destination: Destination) {
        unkeyed.append(socket)
        destinations[socket] = destination
    }

    /// libcurl closed `socket`.
    mutating func closed(_ socket: Int32) {
        destinations[socket] = nil
        if let key = keys.removeValue(forKey: socket) {
            if connections[key]?.socket == socket { connections[key] = nil }
        } else if let index = unkeyed.firstIndex(of: socket) {
            unkeyed.remove(at: index)
        }
    }

    /// Keys the sockets opened since the last call by their addresses: called when a request is
    /// about to go out on a new connection, which is then among them.
    mutating func keyNewSockets() {
        for socket in unkeyed {
            guard let key = Self.key(ofSocket: socket) else { continue }
            keys[socket] = key
            connections[key] = Connection(socket: socket, multiplexed: nil)
        }
        unkeyed.removeAll(keepingCapacity: true)
    }

    /// The connection with these addresses, if known.
    func connection(forKey key: UInt64) -> Connection? {
        connections[key]
    }

    /// Records whether the connection with these addresses multiplexes (HTTP/2).
    mutating func setMultiplexed(_ multiplexed: Bool, forKey key: UInt64) {
        connections[key]?.multiplexed = multiplexed
    }

    // MARK: - Decisions

    /// Whether the socket of a connection about to be reused must be polled for leftover bytes:
    /// only connections known to speak HTTP/1.x (on a transfer that cannot multiplex, they all do).
    static func mustCheck(_ connection: Connection, transferMayMultiplex: Bool) -> Bool {
        transferMayMultiplex ? connection.multiplexed == false : connection.multiplexed != true
    }

    /// Whether `socket` has input waiting (bytes, the peer's close, or an error): a zero-timeout
    /// poll.
    static func hasPendingInput(_ socket: Int32) -> Bool {
        var entry = pollfd(fd: socket, events: Int16(POLLIN) | 0x2000 /* POLLRDHUP */, revents: 0)
        return poll(&entry, 1, 0) > 0 && entry.revents != 0
    }

    // MARK: - Keys

    /// A connection's key: its remote address (as text, the form libcurl reports), remote port and
    /// local port, folded into 64 bits (FNV-1a of the address in the high half).
    static func key(remoteAddress: UnsafePointer<CChar>, remotePort: Int, localPort: Int) -> UInt64 {
        var hash: UInt32 = 2_166_136_261
        var pointer = remoteAddress
        while pointer.pointee != 0 {
            hash = (hash ^ UInt32(UInt8(bitPattern: pointer.pointee))) &* 16_777_619
            pointer += 1
        }
        return UInt64(hash) << 32 | UInt64(remotePort & 0xFFFF) << 16 | UInt64(localPort & 0xFFFF)
    }

    /// The key of a connected TCP socket, from `getpeername`/`getsockname`; `nil` for anything
    /// else (not connected yet, a Unix domain socket).
    static func key(ofSocket socket: Int32) -> UInt64? {
        var peer = sockaddr_storage()
        var local = sockaddr_storage()
        var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var localLength = peerLength
        let named = withUnsafeMutablePointer(to: &peer) { peerPointer in
            withUnsafeMutablePointer(to: &local) { localPointer in
                peerPointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { peerAddress in
                    localPointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { localAddress in
                        getpeername(socket, peerAddress, &peerLength) == 0
                            && getsockname(socket, localAddress, &localLength) == 0
                    }
                }
            }
        }
        guard named else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let remotePort: Int
        let localPort: Int
        switch Int32(peer.ss_family) {
        case AF_INET:
            let (address, port) = withUnsafePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { ($0.pointee.sin_addr, $0.pointee.sin_port) }
            }
            var copy = address
            guard inet_ntop(AF_INET, &copy, &text, socklen_t(text.count)) != nil else { return nil }
            remotePort = Int(UInt16(bigEndian: port))
            localPort = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            }
        case AF_INET6:
            let (address, port) = withUnsafePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    ($0.pointee.sin6_addr, $0.pointee.sin6_port)
                }
            }
            var copy = address
            guard inet_ntop(AF_INET6, &copy, &text, socklen_t(text.count)) != nil else { return nil }
            remotePort = Int(UInt16(bigEndian: port))
            localPort = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    Int(UInt16(bigEndian: $0.pointee.sin6_port))
                }
            }
        default:
            return nil
        }
        return text.withUnsafeBufferPointer {
            key(remoteAddress: $0.baseAddress!, remotePort: remotePort, localPort: localPort)
        }
    }
}
