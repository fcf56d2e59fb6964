// expect: compiles
// A server that imports Hummingbird and BrickRequest names its endpoint's body type
// `BrickRequest.RequestBody` (Hummingbird has a `RequestBody` of its own): what the Guide and
// "Operating the queue" say.
import BrickRequest
import Foundation
import Hummingbird

final class ForwardWebhook: Component, POSTRequestType, JSONResponseType {
    let urlString: String
    let requestBody: BrickRequest.RequestBody?

    init(to url: String, bytes: Data) {
        self.urlString = url
        self.requestBody = BrickRequest.RequestBody(segments: [.data(bytes)])
        super.init()
    }
}

func mount(on router: Router<BasicRequestContext>) {
    router.post("/forward") { request, _ -> HTTPResponse.Status in
        let bytes = try await request.body.collect(upTo: 1 << 20)
        _ = ForwardWebhook(to: "https://partner.example/hook", bytes: Data(buffer: bytes))
        return .accepted
    }
}
