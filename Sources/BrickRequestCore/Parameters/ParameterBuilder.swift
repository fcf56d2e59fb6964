/// The parameters of a request, in the order they were added.
///
/// Text parameters become the query (GET, HEAD, DELETE) or a form body (other methods); as soon as a
/// ``FileParameter`` is present the body is `multipart/form-data`. Bricks can choose another encoding
/// (``JSONBodyRequestType``, ``MultipartRequestType``). Repeated names are kept, in order.
public struct ParameterBuilder: Sendable {
    /// One parameter.
    public enum Entry: Sendable, Hashable {
        /// A text parameter: name and text (`nil` when omitted).
        case text(name: String, value: String?)
        /// A file part.
        case file(FileParameter)
    }

    /// The parameters in order.
    public private(set) var entries: [Entry] = []

    /// Creates an empty builder.
    public init() {}

    /// Adds a text parameter.
    ///
    /// - Parameter parameter: The parameter; its text is read now.
    public mutating func add<T>(_ parameter: TextParameter<T>) {
        entries.append(.text(name: parameter.name, value: parameter.string))
    }

    /// Adds a file part.
    ///
    /// - Parameter file: The file.
    public mutating func add(_ file: FileParameter) {
        entries.append(.file(file))
    }

    /// The text parameters that have a value, as name/value pairs in order.
    public var textPairs: [(name: String, value: String)] {
        entries.compactMap {
            if case .text(let name, let value?) = $0 { return (name, value) }
            return nil
        }
    }

    /// The file parameters in order.
    public var files: [FileParameter] {
        entries.compactMap {
            if case .file(let file) = $0 { return file }
            return nil
        }
    }

    /// Whether nothing was added.
    public var isEmpty: Bool { entries.isEmpty }
}
