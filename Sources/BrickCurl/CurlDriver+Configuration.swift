internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The driver's configuration facet: the options a handle gets once, and those every transfer
/// sets (all of them, every time), the response body file, and the method.
extension CurlDriver {
    // MARK: - Per-transfer configuration

    /// Options that are the same for every transfer of this transport: set once, when a handle is
    /// created. Handles are not `curl_easy_reset` between transfers; instead ``configure(_:for:)``
    /// gives *every* per-transfer option a value on every transfer (its default when unused; the
    /// handle skips the call when it already holds that value), so nothing of an earlier request
    /// can leak into the next (the CVE-2022-32221 class of bug).
    func configureConstants(_ easy: EasyHandle) {
        easy.set(CURLOPT_NOSIGNAL, true)
        // A name lookup that outlives its transfer (the connect timeout ended it; the resolver
        // still waits out resolv.conf's timeout × attempts) is left to its thread, which frees
        // itself: without this, libcurl 7.88 joins that thread when the transfer ends, stopping
        // every transfer of the transport for up to the resolver's whole timeout (DNSFaultTests:
        // 20 s for a 1 s connect timeout). CURLOPT_QUICK_EXIT (322, libcurl 7.87), by number so
        // that older headers build; an older libcurl ignores it.
        _ = easy.set(CURLoption(rawValue: 322), true)
        easy.set(CURLOPT_ERRORBUFFER, pointer: easy.errorBuffer)
        easy.set(CURLOPT_PROTOCOLS_STR, pointer: constantStrings.protocols)
        easy.set(CURLOPT_FOLLOWLOCATION, false)
        if let cookieShare {
            easy.set(CURLOPT_SHARE, pointer: cookieShare)
            easy.set(CURLOPT_COOKIEFILE, "")  // turns the engine on; reads no file
        }
        if let resolveList = constantStrings.resolveList { easy.set(CURLOPT_RESOLVE, pointer: resolveList) }
        if let socket = configuration.unixSocketPath { easy.set(CURLOPT_UNIX_SOCKET_PATH, socket) }
        if let userAgent = constantStrings.userAgent { easy.set(CURLOPT_USERAGENT, pointer: userAgent) }
        easy.set(CURLOPT_HEADERFUNCTION, callback: CurlCallbacks.header)
        easy.set(CURLOPT_WRITEFUNCTION, callback: CurlCallbacks.write)
        easy.set(CURLOPT_READFUNCTION, callback: CurlCallbacks.read)
        let cell = UnsafeRawPointer(easy.transferCell)
        for option in [
            CURLOPT_PRIVATE, CURLOPT_HEADERDATA, CURLOPT_WRITEDATA, CURLOPT_READDATA, CURLOPT_SEEKDATA,
            CURLOPT_XFERINFODATA,
        ] {
            easy.set(option, pointer: cell)
        }
        _ = ccurl_easy_setopt_seek_callback(easy.raw, CurlCallbacks.seek)
        // Sockets are opened and closed through the driver: it knows them (to check a reused
        // connection before a request goes out on it) and can tell why one could not be opened.
        easy.set(CURLOPT_OPENSOCKETDATA, pointer: cell)
        _ = ccurl_easy_setopt_opensocket_callback(easy.raw, CurlCallbacks.openSocket)
        easy.set(CURLOPT_CLOSESOCKETDATA, pointer: UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()))
        _ = ccurl_easy_setopt_closesocket_callback(easy.raw, CurlCallbacks.closeSocket)
        if checksReusedConnections {
            _ = ccurl_easy_setopt_prereq_data(easy.raw, UnsafeMutableRawPointer(mutating: cell))
            _ = ccurl_easy_setopt_prereq_callback(easy.raw, CurlCallbacks.beforeRequest)
        }
        _ = ccurl_easy_setopt_xferinfo_callback(easy.raw, CurlCallbacks.progress)
        easy.set(CURLOPT_CONNECTTIMEOUT_MS, configuration.connectTimeout.milliseconds())
        if configuration.automaticDecompression {
            easy.set(CURLOPT_ACCEPT_ENCODING, pointer: constantStrings.acceptEncoding)
        }
        // HTTP version and TLS. Verification stays at libcurl's default (on); the minimum is TLS 1.2.
        switch configuration.httpVersion {
        case .http1_1: easy.set(CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1)
        case .http2OverTLS: easy.set(CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS)
        }
        easy.set(CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2)
        let tls = configuration.tls
        if let caFile = tls.caFile { easy.set(CURLOPT_CAINFO, caFile) }
        if let caPath = tls.caPath { easy.set(CURLOPT_CAPATH, caPath) }
        if let client = tls.clientCertificate {
            easy.set(CURLOPT_SSLCERT, client.certificatePath)
            easy.set(CURLOPT_SSLKEY, client.privateKeyPath)
            if let password = client.privateKeyPassword { easy.set(CURLOPT_KEYPASSWD, password) }
        }
        if !tls.pinnedPublicKeys.isEmpty {
            easy.set(CURLOPT_PINNEDPUBLICKEY, tls.pinnedPublicKeys.joined(separator: ";"))
        }
        // Proxy settings are explicit so libcurl does not read the environment per transfer.
        easy.set(CURLOPT_NOPROXY, pointer: constantStrings.noProxy)
    }

    /// Whether a transfer starting now must open a new connection, and the largest age in whole
    /// seconds (`CURLOPT_MAXLIFETIME_CONN`, 0 for none) of a connection it may reuse, so that no
    /// connection opened before the last network change is reused.
    ///
    /// libcurl drops a connection whose age in whole seconds exceeds the limit, so `floor(s) - 1`,
    /// `s` seconds after the change, refuses every older connection (and perhaps a few newer ones,
    /// which is safe). The limit cannot express less than 1 (0 disables it): during the first 2
    /// seconds every transfer opens a new connection instead.
    func connectionLimitsAfterNetworkChange() -> (fresh: Bool, maxLifetime: Int) {
        guard let changedAt = networkChangedAt else { return (false, 0) }
        let seconds = (Self.monotonicNanoseconds() &- changedAt) / 1_000_000_000
        if seconds < 2 { return (true, 0) }
        if seconds > 120 {
            networkChangedAt = nil
            return (false, 0)
        }
        return (false, Int(seconds) - 1)
    }

    /// Gives the handle every per-transfer option this transfer needs (see
    /// ``EasyHandle/TransferOptions``; the handle sets only those that differ from what it holds).
    func configure(_ easy: EasyHandle, for transfer: Transfer) -> TransportError? {
        transfer.resetForHop()
        easy.errorBuffer[0] = 0
        let request = transfer.request
        let options = request.options
        transfer.url = request.urlString
        if !forgottenNames.isEmpty { dropCachedAddresses(easy, for: transfer) }
        // A stream holds what it decides to (server-sent events bound their lines and events):
        // only a limit the request sets applies to what passes through it.
        if case .stream = options.destination {
            transfer.limit = options.maxResponseSize ?? Int64.max
        } else {
            transfer.limit = options.maxResponseSize ?? configuration.maxResponseSize
        }
        var header: CurlHeaderLines
        let method: EasyHandle.Method
        do {
            header = try CurlHeaderLines(request)
            method = try methodOptions(request, declaredLength: header.declaredLength)
        } catch {
            return error
        }
        // Response destination: a file is opened before the head is set, since continuing a
        // partial one adds `Range` and `If-Range` (on every hop, so a redirect keeps them).
        transfer.stream = nil
        if case .stream(let stream) = options.destination {
            transfer.stream = stream
            if stream.isPaced {
                stream.attach { [weak transfer] in
                    if let transfer { transfer.driver.submit(.resumeDelivery(transfer)) }
                }
            }
        } else if case .file(let path) = options.destination {
            if !transfer.bodyFile.descriptor.isOpen,
                let error = openBodyFile(for: transfer, destination: path, resuming: options.resumingDownload)
            {
                return error
            }
            if transfer.bodyFile.resumeOffset > 0, let validator = transfer.bodyFile.resumeValidator {
                header.lines.append("Range: bytes=\(transfer.bodyFile.resumeOffset)-")
                header.lines.append("If-Range: \(validator)")
            }
        }
        transfer.upload.length = request.body == nil ? 0 : method.postFieldSize
        let newConnection = transfer.connection.requiresNewConnection
        transfer.connection.requiresNewConnection = false
        let secure = request.isSecure
        transfer.connection.mayMultiplex = secure && configuration.httpVersion == .http2OverTLS
        transfer.connection.egress = nil
        if let policy = options.egressPolicy, !policy.isUnrestricted, configuration.unixSocketPath == nil {
            if resolvedProxy.mayProxy(secure: secure), let proxy = resolvedProxy.proxy(forHost: request.host, secure: secure) {
                // The client sees only the proxy's address: the proxy must enforce the policy.
                guard policy.trustsProxy else {
                    return TransportError(
                        .egressRefused,
                        message: "egress refused: \(request.host) would be reached through the proxy \(proxy), "
                            + "which the egress policy does not trust to enforce it (EgressPolicy.trustingProxy(), "
                            + "or TransportConfiguration.proxy = .none); nothing was sent",
                        requestBytesSent: transfer.redirects.count > 0
                    )
                }
            } else {
                transfer.connection.egress = policy
            }
        }
        // After a network change, connections opened before it may be dead (libcurl would find out
        // only by failing a request on one): see `CurlTransport.networkDidChange()`.
        let (freshAfterChange, maxLifetime) = connectionLimitsAfterNetworkChange()
        let settings = EasyHandle.TransferOptions(
            url: transfer.url,
            timeoutMilliseconds: (options.timeout ?? configuration.requestTimeout).map {
                max(1, $0.milliseconds())
            } ?? 0,
            maxFileSize: transfer.limit,
            // Over TLS, wait for a connection that may turn out to multiplex rather than open more.
            // Never for plain http: HTTP/1.1 cannot multiplex, and waiting would serialise requests.
            pipeWait: secure && configuration.httpVersion == .http2OverTLS,
            proxy: secure ? constantStrings.httpsProxy : constantStrings.httpProxy,
            // A request that is not safe to repeat never rides a reused connection: libcurl would
            // silently re-send it if that connection turned out to be closed.
            freshConnect: !request.isIdempotent || options.requiresFreshConnection || freshAfterChange
                || newConnection,
            maxConnectionAge: maxLifetime,
            noProgress: options.progress == nil,
            method: method,
            headerLines: header.lines
        )
        if let refusal = easy.apply(settings) { return refusal }
        return nil
    }

    /// Opens the file a `.file` destination's body is written to until it is complete, once per
    /// transfer (redirects keep it): the partial download to continue when it is intact,
    /// otherwise a new file next to the destination under a name of its own (moved onto it only
    /// when complete: readers never see a partial body, and a failure leaves the destination
    /// untouched).
    func openBodyFile(
        for transfer: Transfer,
        destination path: String,
        resuming: PartialDownload?
    ) -> TransportError? {
        if let resuming {
            var info = stat()
            let intact =
                resuming.length > 0 && stat(resuming.path, &info) == 0 && Int64(info.st_size) == resuming.length
                && !resuming.validator.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 }
            let descriptor = intact ? open(resuming.path, O_WRONLY | O_APPEND | O_CLOEXEC) : -1
            if descriptor >= 0 {
                transfer.bodyFile.descriptor = FileDescriptor(descriptor)
                transfer.bodyFile.partialPath = resuming.path
                transfer.bodyFile.resumeOffset = resuming.length
                transfer.bodyFile.resumeValidator = resuming.validator
                return nil
            }
            resuming.discard()
        }
        let partial = path + ".brickpart-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        if descriptor < 0 {
            return TransportError.fileIO("cannot create the response body file \(partial)", errno: errno)
        }
        transfer.bodyFile.descriptor = FileDescriptor(descriptor)
        transfer.bodyFile.partialPath = partial
        return nil
    }

    /// How `request`'s method and body are expressed to libcurl (for a body, its length is the
    /// `postFieldSize`).
    func methodOptions(
        _ request: TransportRequest,
        declaredLength: Int64?
    ) throws(TransportError) -> EasyHandle.Method {
        let method = request.method
        guard let body = request.body else {
            switch method {
            case .get: return EasyHandle.Method(post: false, postFieldSize: -1, noBody: false)
            case .head: return EasyHandle.Method(post: false, postFieldSize: -1, noBody: true)
            case .post: return EasyHandle.Method(post: true, postFieldSize: 0, noBody: false)
            default:
                return EasyHandle.Method(post: false, postFieldSize: -1, noBody: false, customRequest: method.rawValue)
            }
        }
        // A stream of unknown length: -1, and libcurl sends it with chunked transfer coding.
        guard let length = try body.knownLength() else {
            let custom = method == .post ? nil : method.rawValue
            return EasyHandle.Method(post: true, postFieldSize: -1, noBody: false, customRequest: custom)
        }
        if let declaredLength, declaredLength != length {
            throw TransportError(
                .invalidRequest,
                message: "Content-Length \(declaredLength) does not match the body's \(length) bytes"
            )
        }
        let custom = method == .post ? nil : method.rawValue
        return EasyHandle.Method(post: true, postFieldSize: length, noBody: false, customRequest: custom)
    }

    // MARK: - DNS cache

    /// After a transfer could not connect to a name's address, forgets what libcurl's DNS cache
    /// (60 s) holds for that name, so that the retry looks it up again: a service that moved (a
    /// failover, a blue-green switch, a pod rescheduled) is reached on the next attempt, not a
    /// minute later. Only for names: an address in the URL has nothing to look up.
    ///
    /// - Parameters:
    ///   - transfer: The transfer that failed.
    ///   - code: libcurl's result.
    ///   - connected: Whether a connection was made (a timeout after it says nothing of the address).
    func forgetAddresses(after transfer: Transfer, code: CURLcode, connected: Bool) {
        guard code == CURLE_COULDNT_CONNECT || (code == CURLE_OPERATION_TIMEDOUT && !connected),
            configuration.unixSocketPath == nil,
            let name = CurlDNSCache.name(of: transfer.url), !forgottenNames.contains(name)
        else { return }
        // Bounded: a name that failed and is never asked for again is let go after 64 others.
        if forgottenNames.count >= Self.forgottenNamesLimit { forgottenNames.removeFirst() }
        forgottenNames.append(name)
    }

    /// The most names ``forgetAddresses(after:code:connected:)`` keeps noted.
    static let forgottenNamesLimit = 64

    /// Sets a `CURLOPT_RESOLVE` list that drops `transfer`'s name from the DNS cache when the name
    /// is one ``forgetAddresses(after:code:connected:)`` noted (the session's host overrides go
    /// with it, so they stay).
    private func dropCachedAddresses(_ easy: EasyHandle, for transfer: Transfer) {
        guard let name = CurlDNSCache.name(of: transfer.url), let index = forgottenNames.firstIndex(of: name) else { return }
        forgottenNames.remove(at: index)
        var list = curl_slist_append(nil, "-" + name)
        var entry = constantStrings.resolveList
        while let current = entry {
            if let data = current.pointee.data { list = curl_slist_append(list, data) }
            entry = current.pointee.next
        }
        if let previous = transfer.resolveList { curl_slist_free_all(previous) }
        transfer.resolveList = list
        easy.set(CURLOPT_RESOLVE, pointer: list)
    }

    /// Gives the handle its constant `CURLOPT_RESOLVE` list back and frees the transfer's own.
    func releaseResolveList(_ easy: EasyHandle, of transfer: Transfer) {
        guard let list = transfer.resolveList else { return }
        easy.set(CURLOPT_RESOLVE, pointer: constantStrings.resolveList)
        curl_slist_free_all(list)
        transfer.resolveList = nil
    }
}
