/// An immutable heap copy of a value, for value types that are copied often on the request path:
/// copying the holder costs one reference count instead of one per stored reference, and changing
/// a field builds a new box (``modified(_:)``), so no box is ever mutated after it is shared.
/// `@usableFromInline`: the getters of ``TransportRequest`` are inlined into the transport's module.
@usableFromInline
final class SharedValue<Value: Sendable>: Sendable {
    @usableFromInline let value: Value

    init(_ value: Value) {
        self.value = value
    }

    /// A new box holding this value with `change` applied.
    func modified(_ change: (inout Value) -> Void) -> SharedValue {
        var copy = value
        change(&copy)
        return SharedValue(copy)
    }
}
