import BrickRequest
import BrickTesting
import Testing

// The Getting Started article's `DecodableResponseType` example, word for word: if the API drifts,
// this stops compiling.
struct User: Decodable, Sendable {
    var name: String
}

final class GetUserModel: Component, GETRequestType, NonAutoRetryType, DecodableResponseType {
    typealias Model = User
    var urlString: String { "https://api.example.com/users" }
    init(userID: String) {
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: userID, name: "userID"))
        super.init(parameterBuilder: parameters)
    }
}

@Suite("The Getting Started article's snippets", .timeLimit(.minutes(3)))
struct GettingStartedSnippetTests {
    @Test("the DecodableResponseType example decodes into the user's type")
    func decodableExample() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users", .json(#"{"name":"Ada"}"#))
        try await Session.shared.withReplacement(.testing(stub)) {
            let user: User = try await GetUserModel(userID: "100").value
            #expect(user.name == "Ada")
        }
        #expect(stub.requests.first?.head.path == "/users?userID=100")
    }
}
