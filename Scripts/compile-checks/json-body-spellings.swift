// expect: compiles
// Every spelling of a JSON body compiles, and each is sent as declared (RenderingTests proves
// the last part at run time).
import BrickRequest

struct NewTodo: Encodable, Sendable { var title: String }

final class OptionalBody: Component, POSTRequestType, JSONBodyRequestType, DataResponseType {
    var urlString: String { "https://api.example.com/todos" }
    var jsonBody: NewTodo? { NewTodo(title: "a") }
}

final class PlainBody: Component, POSTRequestType, JSONBodyRequestType, DataResponseType {
    var urlString: String { "https://api.example.com/todos" }
    var jsonBody: NewTodo { NewTodo(title: "b") }
}

final class ExistentialBody: Component, POSTRequestType, JSONBodyRequestType, DataResponseType {
    var urlString: String { "https://api.example.com/todos" }
    var jsonBody: any Encodable & Sendable { NewTodo(title: "c") }
}

final class OptionalExistentialBody: Component, POSTRequestType, JSONBodyRequestType, DataResponseType {
    var urlString: String { "https://api.example.com/todos" }
    var jsonBody: (any Encodable & Sendable)? { nil }
}
