// expect-error: does not conform to protocol 'Decodable'
// A model that is not Decodable is refused at compile time, never decoded as something else.
import BrickRequest

final class GetLoose: Component, GETRequestType, DecodableResponseType {
    typealias Model = [String: Any]
    var urlString: String { "https://api.example.com/loose" }
}
