// expect-error: does not conform to protocol 'RequestType'
// An endpoint with two method bricks does not say which method it sends: refused.
import BrickRequest

final class Confused: Component, GETRequestType, POSTRequestType, DataResponseType {
    var urlString: String { "https://api.example.com/confused" }
}
