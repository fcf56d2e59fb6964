internal import CCurl
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The C callbacks. Each is a non-capturing closure; the `Transfer` arrives in the handle's cell,
/// the user data.
enum CurlCallbacks {
    static let header: ccurl_data_callback = { buffer, size, count, userData in
        let length = size * count
        return buffer!.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
            Transfer.with(cell: userData) { $0.receiveHeader(UnsafeBufferPointer(start: bytes, count: length)) }
        }
    }

    static let write: ccurl_data_callback = { buffer, size, count, userData in
        Transfer.with(cell: userData) { $0.receiveBody(buffer!, size * count) }
    }

    static let read: ccurl_data_callback = { buffer, size, count, userData in
        Transfer.with(cell: userData) { $0.readBody(into: buffer!, capacity: size * count) }
    }

    static let seek: ccurl_seek_callback = { userData, offset, origin in
        guard origin == SEEK_SET else { return ccurl_seekfunc_cantseek() }
        return Transfer.from(cell: userData).rewindBody(to: Int64(offset))
    }

    /// Opens a socket for libcurl (close-on-exec) and records it with the driver; a failure's
    /// `errno` stays with the transfer (libcurl reports only "couldn't connect").
    static let openSocket: ccurl_opensocket_callback = { userData, _, address in
        guard let address else { return ccurl_socket_bad() }
        // The egress policy, on the address about to be connected: no gap for DNS rebinding.
        let refused = Transfer.with(cell: userData) { transfer in
            guard let policy = transfer.connection.egress else { return false }
            let offset = MemoryLayout<curl_sockaddr>.offset(of: \.addr)!
            let socketAddress = UnsafeRawPointer(address).advanced(by: offset).assumingMemoryBound(to: sockaddr.self)
            return transfer.driver.refusesEgress(for: transfer, policy: policy, address: IPAddress(socketAddress: socketAddress))
        }
        if refused { return ccurl_socket_bad() }
        let socket = Glibc.socket(
            address.pointee.family,
            address.pointee.socktype | ccurl_sock_cloexec(),
            address.pointee.protocol
        )
        let failure = socket < 0 ? errno : 0
        Transfer.with(cell: userData) { transfer in
            if socket < 0 {
                transfer.connection.socketErrno = failure
            } else {
                let request = transfer.request
                transfer.driver.connections.opened(socket, to: .init(host: request.host, port: request.port))
            }
        }
        return socket < 0 ? ccurl_socket_bad() : socket
    }

    /// Closes a socket of libcurl's; the user data is the driver (the connection may outlive the
    /// transfer that opened it).
    static let closeSocket: ccurl_closesocket_callback = { userData, socket in
        Unmanaged<CurlDriver>.fromOpaque(userData!)._withUnsafeGuaranteedRef { $0.connections.closed(socket) }
        return close(socket)
    }

    /// Just before a request goes out: a reused connection with bytes waiting is not used.
    static let beforeRequest: ccurl_prereq_callback = { userData, primaryAddress, _, primaryPort, localPort in
        Transfer.with(cell: userData) { transfer in
            transfer.driver.mayUseConnection(
                for: transfer,
                remoteAddress: primaryAddress,
                remotePort: Int(primaryPort),
                localPort: Int(localPort)
            )
        } ? ccurl_prereqfunc_ok() : ccurl_prereqfunc_abort()
    }

    static let progress: ccurl_xferinfo_callback = { userData, downloadTotal, downloadNow, uploadTotal, uploadNow in
        let transfer = Transfer.from(cell: userData)
        guard let report = transfer.request.options.progress else { return 0 }
        // A continued download counts the bytes it started with.
        let offset = transfer.bodyFile.resumeOffset
        let progress = TransportRequest.Progress(
            bytesReceived: Int64(downloadNow) + offset,
            totalBytesExpectedToReceive: downloadTotal > 0 ? Int64(downloadTotal) + offset : 0,
            bytesSent: Int64(uploadNow),
            totalBytesExpectedToSend: Int64(uploadTotal)
        )
        // libcurl calls many times with the same figures: only changes are reported.
        guard progress != transfer.reportedProgress else { return 0 }
        transfer.reportedProgress = progress
        report(progress)
        return 0
    }
}
