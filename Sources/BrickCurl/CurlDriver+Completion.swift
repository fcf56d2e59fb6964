internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The driver's completion facet: a transfer that libcurl finished becomes a response or an
/// error (restarts and redirects aside), its metrics are read, its handle goes back to the pool;
/// and the tear-down of the whole driver.
extension CurlDriver {
    func completed(_ transfer: Transfer, code: CURLcode) {
        guard let easy = transfer.easy else { return }
        if transfer.resolveList != nil { releaseResolveList(easy, of: transfer) }
        if code == CURLE_ABORTED_BY_CALLBACK && transfer.connection.restartsOnNewConnection {
            // Nothing was sent on the refused connection (libcurl closes it): the same request
            // goes out again on a new one.
            curl_multi_remove_handle(multi, easy.raw)
            transfer.connection.requiresNewConnection = true
            if let error = configure(easy, for: transfer) {
                finish(transfer, .failure(error))
                return
            }
            curl_multi_add_handle(multi, easy.raw)
            return
        }
        if code == CURLE_OK && transfer.header.state != .complete {
            // libcurl 7.88 takes a header block cut off by the peer for a complete response.
            finish(
                transfer,
                .failure(
                    TransportError(
                        .connectionReset,
                        message: "the connection closed before the response header was complete",
                        curlCode: Int(CURLE_PARTIAL_FILE.rawValue),
                        requestBytesSent: true
                    )
                )
            )
            return
        }
        if code != CURLE_OK {
            if code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT {
                forgetAddresses(after: transfer, code: code, connected: easy.offset(CURLINFO_CONNECT_TIME_T) > 0)
            }
            finish(transfer, .failure(CurlErrorMapping.error(code: code, easy: easy, transfer: transfer)))
            return
        }
        let status = easy.long(CURLINFO_RESPONSE_CODE)
        if transfer.request.options.followsRedirects, Transfer.isRedirect(status),
            let location = easy.string(CURLINFO_REDIRECT_URL)
        {
            switch redirect(transfer, status: status, to: location) {
            case .followed: return
            case .failed(let error):
                finish(transfer, .failure(error))
                return
            case .deliver: break
            }
        }
        if transfer.bodyFile.descriptor.isOpen && fsync(transfer.bodyFile.descriptor.raw) != 0 && errno != EINVAL {
            finish(
                transfer,
                .failure(
                    TransportError.fileIO("cannot flush the response body file", errno: errno, requestBytesSent: true)
                )
            )
            return
        }
        if let partial = transfer.bodyFile.partialPath, case .file(let path) = transfer.request.options.destination {
            // A continued download whose final response had no body did not continue it.
            if transfer.bodyFile.resumeOffset > 0 && !transfer.sawBody { _ = ftruncate(transfer.bodyFile.descriptor.raw, 0) }
            // The whole body is on disk: it takes the destination's place in one step.
            if rename(partial, path) != 0 {
                finish(
                    transfer,
                    .failure(
                        TransportError.fileIO("cannot move the response body to \(path)", errno: errno, requestBytesSent: true)
                    )
                )
                return
            }
            transfer.bodyFile.partialPath = nil
        }
        // Learned from the transfer that opened the connection (on HTTP/1.1 it is the first to
        // complete on it); later ones skip the lookups.
        if transfer.connection.mayMultiplex && checksReusedConnections && easy.long(CURLINFO_NUM_CONNECTS) > 0 {
            noteProtocol(of: easy)
        }
        var body: Data? = nil
        if !transfer.bodyFile.descriptor.isOpen && transfer.stream == nil {
            guard let taken = transfer.body.takeData() else {
                finish(
                    transfer,
                    .failure(TransportError(.outOfResources, message: "out of memory for the response body", requestBytesSent: true))
                )
                return
            }
            body = taken
        }
        let response = TransportResponse(
            status: HTTPResponse.Status(code: min(max(status, 0), 999)),
            rawHeaders: easy.headerBlock.bytes,
            body: body,
            bodyFile: transfer.bodyFile.descriptor.isOpen ? destinationPath(transfer) : nil,
            metrics: metrics(easy, transfer),
            url: transfer.url
        )
        finish(transfer, .success(response))
    }

    /// Records whether the connection a response came on multiplexes (HTTP/2), so that reusing
    /// an HTTP/1.1 one over TLS is checked before sending and an HTTP/2 one is not.
    func noteProtocol(of easy: EasyHandle) {
        var address: UnsafeMutablePointer<CChar>? = nil
        guard ccurl_easy_getinfo_string(easy.raw, CURLINFO_PRIMARY_IP, &address) == CURLE_OK, let address else { return }
        let key = ConnectionRegistry.key(
            remoteAddress: address,
            remotePort: easy.long(CURLINFO_PRIMARY_PORT),
            localPort: easy.long(CURLINFO_LOCAL_PORT)
        )
        connections.setMultiplexed(easy.long(CURLINFO_HTTP_VERSION) >= 3, forKey: key)
    }

    func destinationPath(_ transfer: Transfer) -> String? {
        if case .file(let path) = transfer.request.options.destination { return path }
        return nil
    }

    /// Detaches the handle, returns it to the pool and delivers the outcome (outside any lock).
    func finish(_ transfer: Transfer, _ result: Result<TransportResponse, TransportError>) {
        guard transfer.state == .active, let easy = transfer.easy else { return }
        curl_multi_remove_handle(multi, easy.raw)
        easy.transferCell.pointee = nil
        transfer.easy = nil
        transfer.state = .done
        transfer.closeFiles()
        let index = transfer.activeIndex
        let last = active.removeLast()
        if last !== transfer {
            active[index] = last
            last.activeIndex = index
        }
        transfer.activeIndex = -1
        // Every handle is kept while transfers are in flight or queued (the next ones reuse them:
        // creating a handle and setting its constant options costs about as much as a transfer);
        // beyond `maxIdleHandles` they are freed as soon as the driver has nothing left to do.
        idleHandles.append(easy)
        if active.isEmpty && local.isEmpty && deferred.isEmpty { trimIdleHandles() }
        publishStatistics()
        // A failed transfer leaves the destination as it was, and no partial body behind unless
        // it was asked to keep one that can be continued.
        var result = result
        if case .failure(var error) = result, let kept = transfer.keepPartialFile(after: error) {
            error.partialDownload = kept
            result = .failure(error)
        }
        transfer.removePartialFile()
        transfer.completion(result)
    }

    func trimIdleHandles() {
        while idleHandles.count > configuration.maxIdleHandles {
            idleHandles.removeLast()
            easyHandleCount -= 1
        }
    }

    func publishStatistics() {
        statistics.activeTransfers.store(active.count, ordering: .relaxed)
        statistics.easyHandles.store(easyHandleCount, ordering: .relaxed)
    }

    func tearDown() {
        for command in inbox.withLock({ inbox -> [Command] in
            inbox.stopped = true
            defer { inbox.commands.removeAll() }
            return inbox.commands
        }) + local {
            switch command {
            case .start(let transfer) where transfer.state == .pending:
                transfer.state = .done
                transfer.completion(.failure(TransportError(.shutdown, message: "the transport was shut down")))
            case .job(let job):
                Self.runElsewhere(job)
            case .safePoint(let work):
                deferred.append(work)
            case .cookies(.list(let answer)):
                answer([])
            case .cookies(.removeAll(let done)):
                done()
            default:
                break
            }
        }
        local.removeAll()
        while let transfer = active.last {
            finish(transfer, .failure(TransportError(.shutdown, message: "the transport was shut down")))
        }
        idleHandles.removeAll()
        easyHandleCount = 0
        publishStatistics()
        curl_multi_cleanup(multi)
        // The share goes last: no handle may still use it.
        cookieHandle = nil
        if let cookieShare { curl_share_cleanup(cookieShare) }
        constantStrings.free()
        // Work scheduled by the completions above (handler drains) still runs, here; jobs move to
        // the global executor. Anything scheduled from now on takes the callers' fallbacks.
        leaderThread.store(0, ordering: .relaxed)
        executor = nil
        standby?.stop()
        for work in deferred { Self.run(work, on: nil) }
        deferred.removeAll()
    }

    // MARK: - Metrics

    func metrics(_ easy: EasyHandle, _ transfer: Transfer) -> TransportMetrics {
        var metrics = TransportMetrics()
        metrics.nameLookup = .microseconds(easy.offset(CURLINFO_NAMELOOKUP_TIME_T))
        metrics.connect = .microseconds(easy.offset(CURLINFO_CONNECT_TIME_T))
        metrics.tlsHandshake = .microseconds(easy.offset(CURLINFO_APPCONNECT_TIME_T))
        metrics.firstByte = .microseconds(easy.offset(CURLINFO_STARTTRANSFER_TIME_T))
        metrics.total = .microseconds(easy.offset(CURLINFO_TOTAL_TIME_T))
        switch easy.long(CURLINFO_HTTP_VERSION) {
        case 1: metrics.httpVersion = .http1_0  // CURL_HTTP_VERSION_1_0
        case 2: metrics.httpVersion = .http1_1
        case 3: metrics.httpVersion = .http2
        case 30: metrics.httpVersion = .http3
        default: metrics.httpVersion = .unknown
        }
        metrics.connectionReused = easy.long(CURLINFO_NUM_CONNECTS) == 0
        metrics.requestHeaderBytes = Int64(easy.long(CURLINFO_REQUEST_SIZE))
        metrics.bytesSent = transfer.upload.sent
        metrics.bytesReceived = transfer.received
        metrics.redirectCount = transfer.redirects.count
        return metrics
    }
}
