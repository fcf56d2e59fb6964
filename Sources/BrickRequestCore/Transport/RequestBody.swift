import FoundationEssentials
import Glibc

/// The body of a request: a sequence of in-memory, on-disk and streamed segments, sent in order.
///
/// Files are read while the request is sent, never loaded whole, so a multipart upload of a large
/// file needs no more memory than a small one. A body can be sent again (a redirect that keeps the
/// method, a retry): every segment is re-read from its start — except a stream whose source is
/// not replayable (``RequestBodySource``), which goes out once.
public struct RequestBody: Sendable, Hashable {
    /// One part of a body.
    public enum Segment: Sendable, Hashable {
        /// Bytes held in memory.
        case data(Data)
        /// The bytes of a file, read from disk as they are sent.
        case file(path: String)
        /// Bytes produced while they are sent, by an `AsyncSequence` (``RequestBodySource``).
        case stream(RequestBodySource)
    }

    /// The segments, sent in order.
    public var segments: [Segment]

    /// Creates a body from segments.
    ///
    /// - Parameter segments: The parts of the body, sent in order.
    public init(segments: [Segment]) {
        self.segments = segments
    }

    /// A body of in-memory bytes.
    ///
    /// - Parameter data: The bytes to send.
    /// - Returns: A one-segment body.
    public static func data(_ data: Data) -> RequestBody {
        RequestBody(segments: [.data(data)])
    }

    /// A body streamed from a file on disk.
    ///
    /// - Parameter path: The file's path. It is opened when the request starts; a missing file
    ///   fails the request with ``TransportError/Kind/fileIO`` before anything is sent.
    /// - Returns: A one-segment body.
    public static func file(path: String) -> RequestBody {
        RequestBody(segments: [.file(path: path)])
    }

    /// The total length in bytes, reading file sizes from disk.
    ///
    /// - Throws: ``TransportError`` of kind ``TransportError/Kind/fileIO`` when a file cannot be read,
    ///   of kind ``TransportError/Kind/invalidRequest`` when a stream's length is not known.
    /// - Returns: The number of bytes the body will send.
    public func contentLength() throws(TransportError) -> Int64 {
        guard let length = try knownLength() else {
            throw TransportError(.invalidRequest, message: "the body's length is not known (a stream without one)")
        }
        return length
    }

    /// Whether every segment can be sent (again): `false` once a single-pass stream went out.
    package var canBeSentAgain: Bool {
        segments.allSatisfy { segment in
            if case .stream(let source) = segment { return source.canBeSentAgain }
            return true
        }
    }

    /// The total length in bytes, or `nil` when a stream's is unknown.
    package func knownLength() throws(TransportError) -> Int64? {
        var total: Int64 = 0
        for segment in segments {
            switch segment {
            case .data(let data):
                total += Int64(data.count)
            case .file(let path):
                var info = stat()
                guard stat(path, &info) == 0 else {
                    throw TransportError.fileIO("cannot read request body file \(path)", errno: errno)
                }
                guard (info.st_mode & S_IFMT) == S_IFREG else {
                    throw TransportError(.fileIO, message: "request body file \(path) is not a regular file")
                }
                total += Int64(info.st_size)
            case .stream(let source):
                guard let length = source.length else { return nil }
                total += length
            }
        }
        return total
    }
}
