// expect-error: does not conform to the 'Sendable' protocol
// A JSON body that is not Sendable cannot be declared (it is encoded off the caller's thread).
import BrickRequest

final class Draft: Encodable {
    var title = "x"
}

final class PostDraft: Component, POSTRequestType, JSONBodyRequestType, DataResponseType {
    var urlString: String { "https://api.example.com/drafts" }
    var jsonBody: Draft? { Draft() }
}
