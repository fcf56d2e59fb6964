import Glibc

/// The first part of a response body, kept in a file after its transfer failed, that a later
/// request can continue instead of downloading it all again.
///
/// A transfer to a ``TransportRequest/ResponseDestination/file(path:)`` destination whose options
/// set ``TransportRequest/Options/keepsPartialDownload`` leaves one behind, in
/// ``TransportError/partialDownload``, when it fails after some of a body that can be resumed
/// arrived: a `200` (or the `206` of a resumed transfer) that is not content-encoded and carries a
/// strong `ETag` or a `Last-Modified` date. Pass it back in
/// ``TransportRequest/Options/resumingDownload`` to continue, or call ``discard()``: whoever
/// receives one owns its file. A ``Session`` does both for you: its retries of a download resume
/// it, and it discards what is left when the request finally fails.
public struct PartialDownload: Sendable, Hashable {
    /// The file holding the bytes received so far (next to the destination).
    public let path: String
    /// How many bytes the file holds: the offset the transfer continues from.
    public let length: Int64
    /// The entity tag or `Last-Modified` date of the response the bytes came from; sent as
    /// `If-Range`, so a resource that changed since is downloaded whole instead of spliced.
    public let validator: String

    /// Describes a partial download (for a transport of your own, or a test).
    ///
    /// - Parameters:
    ///   - path: The file holding the bytes received so far.
    ///   - length: How many bytes it holds.
    ///   - validator: The `ETag` or `Last-Modified` value of the response they came from.
    public init(path: String, length: Int64, validator: String) {
        self.path = path
        self.length = length
        self.validator = validator
    }

    /// Deletes the partial file, for a download that will not be continued.
    public func discard() {
        unlink(path)
    }
}
