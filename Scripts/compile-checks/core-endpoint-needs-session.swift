// expect-error: does not conform to protocol 'RequestType'
// On the core alone there is no default session (Session.shared is the curl transport's, given by
// `import BrickRequest`): an endpoint must name its own.
import BrickRequestCore

final class Ping: Component, GETRequestType, StringResponseType {
    var urlString: String { "http://127.0.0.1/ping" }
}
