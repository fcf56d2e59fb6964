import Synchronization

/// A gate the test opens: responses held by it (``ScriptedResponse/held(_:until:)``) are answered
/// once it is open, at once after that. It replaces "the server takes 5 s" in tests that need a
/// request to stay in flight while something else happens, however loaded the machine is.
public final class ResponseGate: Sendable, Hashable {
    private struct State {
        var isOpen = false
        var waiting: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())

    /// Creates a closed gate.
    public init() {}

    /// Whether the gate is open.
    public var isOpen: Bool { state.withLock { $0.isOpen } }

    /// Opens the gate: every held response is answered now, and those held later at once.
    public func open() {
        let waiting = state.withLock { state -> [@Sendable () -> Void] in
            state.isOpen = true
            defer { state.waiting = [] }
            return state.waiting
        }
        waiting.forEach { $0() }
    }

    /// Runs `action` when the gate opens (now, if it is open).
    func whenOpen(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.isOpen { return true }
            state.waiting.append(action)
            return false
        }
        if now { action() }
    }

    /// The same gate.
    public static func == (lhs: ResponseGate, rhs: ResponseGate) -> Bool { lhs === rhs }

    /// Hashes the gate's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
