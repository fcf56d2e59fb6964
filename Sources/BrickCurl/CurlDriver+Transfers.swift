internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The driver's transfer facet: starting a transfer on a handle, checking a reused connection
/// before a request goes out on it, resuming a paused body, and failing transfers that went idle.
extension CurlDriver {
    /// Lets a paused stream's body flow again (libcurl delivers what it held back first, from
    /// inside `curl_easy_pause`).
    func resumeDelivery(_ transfer: Transfer) {
        guard transfer.state == .active, let easy = transfer.easy, transfer.flow.streamPaused else { return }
        transfer.flow.streamPaused = false
        guard transfer.flow.receivePaused else { return }
        transfer.flow.receivePaused = false
        let code = curl_easy_pause(easy.raw, ccurl_pause_continue())
        if code != CURLE_OK, transfer.state == .active {
            finish(transfer, .failure(CurlErrorMapping.error(code: code, easy: easy, transfer: transfer)))
        }
    }

    /// Lets a paused streamed request body flow again: libcurl calls the read callback again
    /// (the receiving side stays paused if its stream paused it).
    func resumeUpload(_ transfer: Transfer) {
        guard transfer.state == .active, let easy = transfer.easy, transfer.upload.paused else { return }
        transfer.upload.paused = false
        let code = curl_easy_pause(easy.raw, transfer.flow.receivePaused ? ccurl_pause_receive_only() : ccurl_pause_continue())
        if code != CURLE_OK, transfer.state == .active {
            finish(transfer, .failure(CurlErrorMapping.error(code: code, easy: easy, transfer: transfer)))
        }
    }

    /// Open connections by destination, and how many of them carry no transfer now (an HTTP/1.1
    /// reading: each transfer under way holds one connection; HTTP/2 streams share one, so idle
    /// ones are then undercounted).
    func connectionCounts() -> [CurlTransport.HostConnections] {
        var busy: [ConnectionRegistry.Destination: Int] = [:]
        for transfer in active {
            busy[.init(host: transfer.request.host, port: transfer.request.port), default: 0] += 1
        }
        return connections.openCounts.map { destination, open in
            CurlTransport.HostConnections(
                host: destination.host,
                port: destination.port,
                open: open,
                idle: max(0, open - (busy[destination] ?? 0))
            )
        }.sorted { ($0.host, $0.port) < ($1.host, $1.port) }
    }

    /// The check before a request goes out (`CURLOPT_PREREQFUNCTION`): on a reused HTTP/1.x
    /// connection with input waiting, returns `false` and marks the transfer to start again on a
    /// new connection (see ``ConnectionRegistry``).
    func mayUseConnection(
        for transfer: Transfer,
        remoteAddress: UnsafePointer<CChar>?,
        remotePort: Int,
        localPort: Int
    ) -> Bool {
        guard let easy = transfer.easy, let remoteAddress else { return true }
        let reused = easy.long(CURLINFO_NUM_CONNECTS) == 0
        if reused, let policy = transfer.connection.egress,
            refusesEgress(for: transfer, policy: policy, address: IPAddress(numericCString: remoteAddress))
        {
            // A connection another request opened (perhaps under another policy): checked again.
            return false
        }
        if !reused {
            // A new connection: its socket is among those not keyed yet.
            connections.keyNewSockets()
            return true
        }
        let key = ConnectionRegistry.key(remoteAddress: remoteAddress, remotePort: remotePort, localPort: localPort)
        guard let connection = connections.connection(forKey: key),
            ConnectionRegistry.mustCheck(connection, transferMayMultiplex: transfer.connection.mayMultiplex),
            ConnectionRegistry.hasPendingInput(connection.socket)
        else { return true }
        transfer.connection.restartsOnNewConnection = true
        return false
    }

    /// Whether `policy` refuses a connection to `address` for `transfer`'s current hop; a refusal
    /// is kept as the transfer's error. An address of another family (a Unix domain socket) is
    /// the service's own choice and passes.
    func refusesEgress(for transfer: Transfer, policy: EgressPolicy, address: IPAddress?) -> Bool {
        guard let address, let reason = policy.refusal(connectingTo: address, host: { transfer.request.host }) else {
            return false
        }
        transfer.abortError = TransportError(
            .egressRefused,
            message: "egress refused: \(reason); nothing was sent to it",
            requestBytesSent: transfer.redirects.count > 0
        )
        return true
    }

    func begin(_ transfer: Transfer) {
        let easy: EasyHandle
        if let reused = idleHandles.popLast() {
            easy = reused
        } else if let created = EasyHandle() {
            configureConstants(created)
            easy = created
            easyHandleCount += 1
        } else {
            transfer.state = .done
            transfer.completion(
                .failure(
                    TransportError(
                        .other,
                        message: "cannot create a libcurl easy handle (out of memory, or libcurl older than 7.63)"
                    )
                )
            )
            return
        }
        transfer.easy = easy
        easy.transferCell.pointee = transfer.unmanagedPointer
        transfer.state = .active
        if configuration.redirects.maxRedirects <= 0 { transfer.request.options.followsRedirects = false }
        transfer.activeIndex = active.count
        active.append(transfer)
        publishStatistics()
        if let error = configure(easy, for: transfer) {
            finish(transfer, .failure(error))
            return
        }
        curl_multi_add_handle(multi, easy.raw)
    }


    /// Fails the transfers that moved fewer than ``idleMinimumBytes`` (1: none) in ``idleNanoseconds``
    /// once their request was on its
    /// way (time spent waiting for a connection or connecting does not count: the connect timeout
    /// covers it). Checks every ``idleCheckNanoseconds``; returns whether it failed any.
    ///
    /// libcurl's own low-speed check (`CURLOPT_LOW_SPEED_*`) would do this too, but it rearms a
    /// timer on every transfer, which costs about 500 instructions per request; this costs a clock
    /// read per loop round and a look at each active transfer a few times per timeout.
    func failIdleTransfers() -> Bool {
        let now = Self.monotonicNanoseconds()
        guard now >= nextIdleCheck else { return false }
        nextIdleCheck = now &+ idleCheckNanoseconds
        var failed = false
        // Backwards: `finish` moves the last transfer into the finished one's place.
        var index = active.count
        while index > 0 {
            index -= 1
            let transfer = active[index]
            guard let easy = transfer.easy else { continue }
            // A stream that paused its body is not idle: its consumer is behind.
            if transfer.idle.activity &- transfer.idle.seen >= idleMinimumBytes || transfer.idle.quietSince == 0
                || transfer.flow.streamPaused
                || transfer.upload.paused
                || easy.offset(CURLINFO_PRETRANSFER_TIME_T) == 0
            {
                transfer.idle.seen = transfer.idle.activity
                transfer.idle.quietSince = now
                continue
            }
            guard now &- transfer.idle.quietSince >= idleNanoseconds else { continue }
            let seconds = Double(idleNanoseconds) / 1e9
            let error = TransportError(
                .timedOut,
                message: idleMinimumBytes > 1
                    ? "fewer than \(idleMinimumBytes) bytes moved in \(seconds) s, in either direction (idle timeout with idleMinimumBytes)"
                    : "no data moved for \(seconds) s: no request bytes sent, no complete response header line or body bytes received (idle timeout)",
                requestBytesSent: easy.sentRequestBytes
            )
            finish(transfer, .failure(error))
            failed = true
        }
        return failed
    }
}
