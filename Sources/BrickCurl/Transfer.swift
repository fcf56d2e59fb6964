internal import CCurl
import FoundationEssentials
import Glibc
import HTTPTypes
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The state of one request inside ``CurlDriver``: its current hop, the response being received,
/// the body being sent and the redirect chain.
///
/// `@unchecked Sendable` because a `Transfer` is created on a caller's thread and then handed to the
/// driver; after `start`, every mutable field is touched only by the thread holding the driver's
/// lease (one at a time; the lease changes hands with acquire/release ordering).
final class Transfer: @unchecked Sendable {  // after start, mutable state only by the driver's lease holder
    enum State { case pending, active, done }

    let completion: @Sendable (Result<TransportResponse, TransportError>) -> Void
    /// Where ``cancel()`` goes. Strong (a weak reference costs two atomic operations per request):
    /// a task that outlives its transport keeps the stopped driver object alive, and cancelling it
    /// then does nothing (a stopped driver ignores commands).
    let driver: CurlDriver
    @exclusivity(unchecked) var request: TransportRequest
    @exclusivity(unchecked) var state: State = .pending
    @exclusivity(unchecked) var easy: EasyHandle?
    /// Position in the driver's list of active transfers (swap-remove).
    @exclusivity(unchecked) var activeIndex = -1

    // Response of the current hop (its header block is in the handle: ``EasyHandle/headerBlock``).
    @exclusivity(unchecked) var body = BodyAccumulator()
    /// The URL of the current hop, rendered once.
    @exclusivity(unchecked) var url = ""
    @exclusivity(unchecked) var received: Int64 = 0
    @exclusivity(unchecked) var limit: Int64 = 0
    /// The file a `.file` destination's body goes to.
    @exclusivity(unchecked) var bodyFile = BodyFile()
    /// Where the body goes when the destination is a stream.
    @exclusivity(unchecked) var stream: ResponseBodyStream?
    /// The progress last handed to the request's progress callback.
    @exclusivity(unchecked) var reportedProgress: TransportRequest.Progress?
    @exclusivity(unchecked) var sawBody = false
    @exclusivity(unchecked) var discardingBody = false
    /// Set by a callback that aborted the transfer, to explain curl's generic result code.
    @exclusivity(unchecked) var abortError: TransportError?
    /// The current hop's response header lines: where the block stands, its `Content-Length`.
    @exclusivity(unchecked) var header = ResponseHeaderReader()

    /// The connection: what the socket callbacks and the check before sending found.
    @exclusivity(unchecked) var connection = ConnectionState()
    /// Flow control of a stream destination (see ``ResponseBodyStream/Demand/pause``).
    @exclusivity(unchecked) var flow = FlowControl()
    /// The request body being sent.
    @exclusivity(unchecked) var upload = Upload()
    /// Bytes moved, for the idle timeout (see `CurlDriver.failIdleTransfers()`).
    @exclusivity(unchecked) var idle = Idleness()
    /// The redirect chain.
    @exclusivity(unchecked) var redirects = Redirects()
    /// A `CURLOPT_RESOLVE` list of this transfer's own (dropping a name from the DNS cache),
    /// freed when it ends.
    @exclusivity(unchecked) var resolveList: UnsafeMutablePointer<curl_slist>?

    init(
        request: TransportRequest,
        driver: CurlDriver,
        completion: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Void
    ) {
        self.request = request
        self.driver = driver
        self.completion = completion
    }

    deinit {
        if let resolveList { curl_slist_free_all(resolveList) }
        closeFiles()
        removePartialFile()
        body.release()
    }

    /// The partial body to hand over with `error` instead of deleting it, when the request asked
    /// to keep one, the failure is one a later attempt may get past, and the bytes can be
    /// continued (see ``PartialDownload``). The file is then no longer the transfer's to delete.
    func keepPartialFile(after error: TransportError) -> PartialDownload? {
        guard request.options.keepsPartialDownload, let path = bodyFile.partialPath,
            let validator = bodyFile.resumeValidator
        else { return nil }
        switch error.kind {
        case .cancelled, .shutdown, .bodyTooLarge, .fileIO, .invalidRequest, .invalidResponse: return nil
        default: break
        }
        var info = stat()
        guard stat(path, &info) == 0, info.st_size > 0 else { return nil }
        bodyFile.partialPath = nil
        return PartialDownload(path: path, length: Int64(info.st_size), validator: validator)
    }

    /// At the first byte of the final response's body, for a body going to a file: applies
    /// ``ResumeDecision`` — continue the partial file, start it over, or refuse — and keeps what a
    /// later request could continue from.
    private func prepareBodyFile(_ easy: EasyHandle) -> Bool {
        let fields = HeaderParser.fields(from: easy.headerBlock.bytes)
        let decision = ResumeDecision.decide(
            resumeOffset: bodyFile.resumeOffset,
            status: easy.long(CURLINFO_RESPONSE_CODE),
            contentRange: fields[.contentRange],
            contentEncoding: fields[.contentEncoding],
            entityTag: fields[.eTag],
            lastModified: fields[.lastModified]
        )
        switch decision {
        case .append:
            received = bodyFile.resumeOffset
            return true
        case .refuse(let message):
            bodyFile.resumeValidator = nil
            abortError = TransportError(.invalidResponse, message: message, requestBytesSent: true)
            return false
        case .startOver(let truncate, let validator):
            if truncate {
                if ftruncate(bodyFile.descriptor.raw, 0) != 0 {
                    abortError = TransportError.fileIO("cannot truncate the response body file", errno: errno, requestBytesSent: true)
                    return false
                }
                bodyFile.resumeOffset = 0
            }
            bodyFile.resumeValidator = validator
            return true
        }
    }

    /// Closes and deletes the partial response body file, if there is one.
    func removePartialFile() {
        guard let path = bodyFile.partialPath else { return }
        bodyFile.descriptor.close()
        unlink(path)
        bodyFile.partialPath = nil
    }

    /// Asks the driver to cancel this transfer (from any thread; harmless once it is done).
    func cancel() {
        driver.submit(.cancel(self))
    }

    func closeFiles() {
        bodyFile.descriptor.close()
        upload.file.close()
        // A streamed body's producer stops with the transfer.
        upload.pipe?.close()
        upload.pipe = nil
    }

    /// Clears what one hop received, before the first or a redirected hop starts.
    func resetForHop() {
        easy?.headerBlock.removeAll()
        body.release()
        received = 0
        sawBody = false
        discardingBody = false
        abortError = nil
        header = ResponseHeaderReader()
        connection.socketErrno = 0
        connection.restartsOnNewConnection = false
        flow = FlowControl()
        upload.rewind()
    }

    var unmanagedPointer: UnsafeMutableRawPointer {
        Unmanaged.passUnretained(self).toOpaque()
    }

    /// The transfer in an easy handle's ``EasyHandle/transferCell``, which libcurl passes to the
    /// callbacks as user data and returns as `CURLINFO_PRIVATE`.
    static func from(cell: UnsafeMutableRawPointer?) -> Transfer {
        Unmanaged<Transfer>.fromOpaque(transferPointer(cell)).takeUnretainedValue()
    }

    /// Runs `body` with the transfer in `cell` without retain/release: the driver's list of active
    /// transfers keeps it alive while libcurl can call back.
    @inline(__always)
    static func with<R>(cell: UnsafeMutableRawPointer?, _ body: (Transfer) -> R) -> R {
        Unmanaged<Transfer>.fromOpaque(transferPointer(cell))._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    private static func transferPointer(_ cell: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer {
        // Both are set for as long as the handle is in the multi handle, the only time libcurl calls.
        cell!.assumingMemoryBound(to: UnsafeMutableRawPointer?.self).pointee!
    }

    // MARK: - Response headers

    func receiveHeader(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        let count = bytes.count
        idle.activity &+= Int64(count)
        switch header.read(bytes, bodyStarted: sawBody) {
        case .statusLine:
            easy.unsafelyUnwrapped.headerBlock.removeAll()
            return count
        case .field:
            easy.unsafelyUnwrapped.headerBlock.append(bytes)
            return count
        case .tooLarge:
            abortError = TransportError(
                .invalidResponse,
                message: "the server sent a response header block larger than \(ResponseHeaderReader.maxBytes / 1024) KiB",
                requestBytesSent: true
            )
            return 0
        case .conflictingLength:
            abortError = TransportError(
                .invalidResponse,
                message: "response has conflicting Content-Length header fields",
                requestBytesSent: true
            )
            return 0
        }
    }

    /// The current hop's `Content-Length` (-1 when none was sent).
    var contentLength: Int64 { header.contentLength }

    // MARK: - Response body

    /// Why a transfer ends when its ``ResponseBodyStream`` answers `false`.
    private static let streamStopped = TransportError(
        .cancelled,
        message: "the response body stream stopped the transfer",
        requestBytesSent: true
    )

    func receiveBody(_ pointer: UnsafeMutablePointer<CChar>, _ count: Int) -> Int {
        if flow.streamPaused {
            // The stream asked for no more for now: libcurl keeps these bytes and stops reading
            // the socket until the stream resumes delivery (``CurlDriver/resumeDelivery(_:)``).
            flow.receivePaused = true
            return Int(ccurl_writefunc_pause())
        }
        idle.activity &+= Int64(count)
        if !sawBody {
            sawBody = true
            discardingBody = willFollowRedirect()
            if !discardingBody, !bodyFile.descriptor.isOpen, stream == nil {
                let started = body.start(
                    expected: contentLength > 0 && contentLength <= limit ? Int(contentLength) : nil,
                    scratch: easy.unsafelyUnwrapped.bodyScratch
                )
                guard started else {
                    abortError = Self.outOfMemory
                    return 0
                }
            } else if !discardingBody, bodyFile.descriptor.isOpen, !prepareBodyFile(easy.unsafelyUnwrapped) {
                return 0
            } else if !discardingBody, let stream, stream.observesResponse {
                let easy = easy.unsafelyUnwrapped
                let status = HTTPResponse.Status(code: min(max(easy.long(CURLINFO_RESPONSE_CODE), 0), 999))
                guard
                    stream.responseStarted(
                        status: status,
                        headerFields: HeaderParser.fields(from: easy.headerBlock.bytes)
                    )
                else {
                    abortError = Self.streamStopped
                    return 0
                }
            }
        }
        if discardingBody { return count }
        received += Int64(count)
        if received > limit {
            abortError = TransportError(
                .bodyTooLarge,
                message: "response body exceeds the limit of \(limit) bytes (decoded)",
                requestBytesSent: true
            )
            return 0
        }
        if bodyFile.descriptor.isOpen {
            var offset = 0
            while offset < count {
                let written = write(bodyFile.descriptor.raw, pointer + offset, count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    abortError = TransportError.fileIO("cannot write the response body file", errno: errno, requestBytesSent: true)
                    return 0
                }
                offset += written
            }
        } else if let stream {
            switch stream.deliver(UnsafeRawBufferPointer(start: pointer, count: count)) {
            case .more:
                break
            case .pause:
                flow.streamPaused = true
            case .stop:
                abortError = Self.streamStopped
                return 0
            }
        } else if !body.append(pointer, count) {
            abortError = Self.outOfMemory
            return 0
        }
        return count
    }

    /// Why a transfer ends when memory for its body cannot be had.
    private static let outOfMemory = TransportError(
        .outOfResources,
        message: "out of memory for the response body",
        requestBytesSent: true
    )

    /// Whether the current hop's response is a redirect this transfer will follow (its body is then dropped).
    func willFollowRedirect() -> Bool {
        guard request.options.followsRedirects, let easy, Self.isRedirect(easy.long(CURLINFO_RESPONSE_CODE)) else {
            return false
        }
        return easy.string(CURLINFO_REDIRECT_URL) != nil
    }

    static func isRedirect(_ status: Int) -> Bool {
        switch status {
        case 301, 302, 303, 307, 308: return true
        default: return false
        }
    }
}
