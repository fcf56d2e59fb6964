import FoundationEssentials

/// A file part of a multipart body: bytes in memory, or a file on disk streamed as it is sent.
///
/// ```swift
/// parameters.add(FileParameter(fileURL: photoURL, name: "photo", mimeType: "image/png"))
/// ```
public struct FileParameter: Sendable, Hashable {
    /// Where the part's bytes come from.
    public enum Source: Sendable, Hashable {
        /// Bytes in memory.
        case data(Data)
        /// A file on disk, read while the request is sent (never loaded whole).
        case file(path: String)
    }

    /// The form field name.
    public let name: String
    /// The file name announced in `Content-Disposition`.
    public let fileName: String
    /// The part's media type, written into the part's `Content-Type` as it is: one with CR, LF or
    /// NUL is refused when the request is rendered (``BrickError/Code/invalidRequest``).
    public let mimeType: String
    /// The bytes.
    public let source: Source

    /// A part from bytes in memory.
    ///
    /// - Parameters:
    ///   - data: The bytes.
    ///   - name: The form field name.
    ///   - fileName: The file name to announce; default `file`.
    ///   - mimeType: The media type; default `application/octet-stream`.
    public init(data: Data, name: String, fileName: String = "file", mimeType: String = "application/octet-stream") {
        self.source = .data(data)
        self.name = name
        self.fileName = fileName
        self.mimeType = mimeType
    }

    /// A part streamed from a file on disk.
    ///
    /// - Parameters:
    ///   - fileURL: A `file:` URL.
    ///   - name: The form field name.
    ///   - fileName: The file name to announce; default the URL's last path component.
    ///   - mimeType: The media type; default `application/octet-stream`.
    public init(fileURL: URL, name: String, fileName: String? = nil, mimeType: String = "application/octet-stream") {
        self.source = .file(path: fileURL.path)
        self.name = name
        self.fileName = fileName ?? fileURL.lastPathComponent
        self.mimeType = mimeType
    }
}
