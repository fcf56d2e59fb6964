import Synchronization

/// Supplies and refreshes a credential, for ``Authenticator``.
///
/// ```swift
/// struct TokenProvider: CredentialProvider {
///     let store: TokenStore
///     func authorizationHeaders() async throws -> [String: String] { ["Authorization": "Bearer \(await store.token)"] }
///     func refresh() async throws { try await store.refresh() }
/// }
/// ```
public protocol CredentialProvider: Sendable {
    /// The header fields that carry the current credential, applied to each attempt at send time.
    ///
    /// - Returns: Header names and values.
    /// - Throws: When no credential can be produced; the request then fails with
    ///   ``BrickError/Code/authenticationFailed``.
    func authorizationHeaders() async throws -> [String: String]

    /// Obtains a new credential after a `401`. Called once for a wave of concurrent `401`s.
    ///
    /// - Throws: When the refresh fails; every request waiting on it fails with
    ///   ``BrickError/Code/authenticationFailed``.
    func refresh() async throws
}

/// Signs requests at send time and refreshes the credential on `401`, once for all the requests
/// that hit the `401` together; each request is replayed once after a refresh, never more (no
/// refresh loops).
public final class Authenticator: Sendable {
    private struct State {
        var generation = 0
        var refreshing: Task<Void, any Error>?
        var refreshCount = 0
    }

    private let provider: any CredentialProvider
    private let state = Lock(State())

    /// Creates an authenticator.
    ///
    /// - Parameter provider: Supplies and refreshes the credential.
    public init(provider: some CredentialProvider) {
        self.provider = provider
    }

    /// How many refreshes have run (for tests and metrics).
    package var refreshCount: Int { state.withLock { $0.refreshCount } }

    /// The credential's header fields and the generation they belong to.
    package func credential() async throws -> (headers: [String: String], generation: Int) {
        let generation = state.withLock { $0.generation }
        return (try await provider.authorizationHeaders(), generation)
    }

    /// Refreshes after a `401` seen with a credential of `generation`. When another request already
    /// refreshed past that generation, returns at once; when a refresh is running, joins it.
    package func refresh(after generation: Int) async throws {
        let task = state.withLock { state -> Task<Void, any Error>? in
            if state.generation > generation { return nil }
            if let running = state.refreshing { return running }
            let provider = self.provider
            let task = Task { try await provider.refresh() }
            state.refreshing = task
            state.refreshCount += 1
            return task
        }
        guard let task else { return }
        let result = await task.result
        state.withLock { state in
            if state.refreshing != nil {
                state.refreshing = nil
                if case .success = result { state.generation += 1 }
            }
        }
        try result.get()
    }
}

/// Signs every attempt with an ``Authenticator`` and refreshes the credential once on `401`.
///
/// ```swift
/// final class GetProfile: Component, GETRequestType, AuthenticatedRequestType, JSONResponseType {
///     var urlString: String { "https://api.example.com/me" }
///     var authenticator: Authenticator { Session.apiAuthenticator }
/// }
/// ```
///
/// Credentials are applied at send time and are never part of the rendered request that other
/// components (logs, the offline queue) see.
public protocol AuthenticatedRequestType: RequestType {
    /// The authenticator that signs the request.
    var authenticator: Authenticator { get }
}

extension AuthenticatedRequestType {
    /// ``authenticator``.
    public var requestAuthenticator: Authenticator? { authenticator }
}
