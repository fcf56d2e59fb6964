internal import CCurl
import FoundationEssentials
import Glibc
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The request body side of a transfer: libcurl's read and seek callbacks.
extension Transfer {
    func readBody(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
        guard let segments = request.body?.segments else { return 0 }
        var filled = 0
        while filled < capacity && upload.segmentIndex < segments.count {
            switch segments[upload.segmentIndex] {
            case .data(let data):
                let remaining = data.count - upload.segmentOffset
                if remaining <= 0 {
                    upload.segmentIndex += 1
                    upload.segmentOffset = 0
                    continue
                }
                let chunk = min(remaining, capacity - filled)
                data.withUnsafeBytes { bytes in
                    (buffer + filled).update(
                        from: bytes.baseAddress!.advanced(by: upload.segmentOffset).assumingMemoryBound(to: CChar.self),
                        count: chunk
                    )
                }
                upload.segmentOffset += chunk
                filled += chunk
            case .file(let path):
                if !upload.file.isOpen {
                    upload.file = FileDescriptor(open(path, O_RDONLY | O_CLOEXEC))
                    if !upload.file.isOpen {
                        abortError = TransportError.fileIO("cannot open request body file \(path)", errno: errno, requestBytesSent: true)
                        return Int(ccurl_readfunc_abort())
                    }
                }
                let count = read(upload.file.raw, buffer + filled, capacity - filled)
                if count < 0 {
                    if errno == EINTR { continue }
                    abortError = TransportError.fileIO("cannot read request body file \(path)", errno: errno, requestBytesSent: true)
                    return Int(ccurl_readfunc_abort())
                }
                if count == 0 {
                    upload.file.close()
                    upload.segmentIndex += 1
                    upload.segmentOffset = 0
                    continue
                }
                filled += count
            case .stream(let source):
                if upload.pipe == nil {
                    guard let pipe = source.open(resumeReader: { [weak self] in
                        if let self { self.driver.submit(.resumeUpload(self)) }
                    })
                    else {
                        abortError = TransportError(
                            .requestBodyFailed,
                            message: "the request body is a single-pass stream that was sent already; it cannot be sent again",
                            requestBytesSent: true
                        )
                        return Int(ccurl_readfunc_abort())
                    }
                    upload.pipe = pipe
                }
                switch upload.pipe!.read(into: buffer + filled, capacity: capacity - filled) {
                case .bytes(let count):
                    filled += count
                case .end:
                    upload.pipe?.close()
                    upload.pipe = nil
                    upload.segmentIndex += 1
                    upload.segmentOffset = 0
                case .pause:
                    if filled > 0 { return finishRead(filled) }
                    upload.paused = true
                    return Int(ccurl_readfunc_pause())
                case .failed(let reason):
                    abortError = TransportError(.requestBodyFailed, message: reason, requestBytesSent: true)
                    return Int(ccurl_readfunc_abort())
                }
            }
        }
        return finishRead(filled)
    }

    private func finishRead(_ filled: Int) -> Int {
        upload.sent += Int64(filled)
        idle.activity &+= Int64(filled)
        return filled
    }

    /// libcurl asks to rewind when it must send the body again on the same handle.
    func rewindBody(to offset: Int64) -> Int32 {
        guard offset == 0 else { return ccurl_seekfunc_cantseek() }
        if let body = request.body, !body.canBeSentAgain {
            // A single-pass stream that started cannot go out again (a redirect that keeps the body).
            abortError = TransportError(
                .requestBodyFailed,
                message: "the request body is a single-pass stream that was sent already; it cannot be sent again",
                requestBytesSent: true
            )
            return ccurl_seekfunc_cantseek()
        }
        upload.rewind()
        return ccurl_seekfunc_ok()
    }
}
