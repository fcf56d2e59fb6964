import BrickRequest
import FoundationEssentials

/// A failure of an ``OfflineStore``.
public struct OfflineStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of failure.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The disk (or the file system's quota) is full: nothing was stored.
        public static let diskFull = Kind("diskFull")
        /// The store's file is not a database or is damaged.
        public static let corrupt = Kind("corrupt")
        /// A pending entry has the same dedupe key (``DedupePolicy/reject``).
        public static let duplicate = Kind("duplicate")
        /// The entry does not exist (any more).
        public static let notFound = Kind("notFound")
        /// Any other failure to read or write the store (permissions, I/O).
        public static let io = Kind("io")
        /// A queue or store name breaks the naming rule (see ``OfflineEntry/checkQueueName(_:)``):
        /// refused before any I/O.
        public static let invalidName = Kind("invalidName")

        /// The kind's name.
        public var description: String { name }
    }

    /// The class of failure.
    public let kind: Kind
    /// What happened, without payloads.
    public let message: String

    /// Creates an error.
    public init(_ kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }

    /// `OfflineStoreError.kind: message`.
    public var description: String { "OfflineStoreError.\(kind): \(message)" }
}
