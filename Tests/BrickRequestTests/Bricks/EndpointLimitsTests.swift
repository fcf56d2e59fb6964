import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

/// A GET whose response-size limit and redirect following are its own.
final class LimitedFetch: Component, GETRequestType, DataResponseType {
    let urlString: String
    let session: Session
    let maxResponseSize: Int64?
    let followsRedirects: Bool
    init(_ url: String, session: Session, maxResponseSize: Int64? = nil, followsRedirects: Bool = true) {
        self.urlString = url
        self.session = session
        self.maxResponseSize = maxResponseSize
        self.followsRedirects = followsRedirects
        super.init()
    }
}

@Suite("Bricks: an endpoint's own response-size limit and redirect following", .timeLimit(.minutes(2)))
struct EndpointLimitsTests {
    @Test("both are rendered into the request's options; the defaults leave the session's")
    func rendered() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/a", StubResponse(status: .ok))
        let session = Session.testing(stub)
        _ = await LimitedFetch("https://api.example.com/a", session: session).response()
        _ = await LimitedFetch(
            "https://api.example.com/a",
            session: session,
            maxResponseSize: 1000,
            followsRedirects: false
        ).response()
        let options = stub.requests.map(\.options)
        #expect(options.map(\.maxResponseSize) == [nil, 1000])
        #expect(options.map(\.followsRedirects) == [true, false])
    }

    @Test("an endpoint's limit is enforced, and can be above the session's")
    func sizeLimit() async throws {
        try await withServer { server in
            var configuration = Session.Configuration()
            configuration.transport.maxResponseSize = 1000
            let session = Session(configuration: configuration)
            let overSession = await LimitedFetch(server.baseURL + "/bytes/5000", session: session).response()
            let raised = await LimitedFetch(server.baseURL + "/bytes/5000", session: session, maxResponseSize: 10_000)
                .response()
            let lowered = await LimitedFetch(server.baseURL + "/bytes/500", session: Session(), maxResponseSize: 100)
                .response()
            #expect(overSession.error?.transportError?.kind == .bodyTooLarge)
            #expect(raised.value?.count == 5000)
            #expect(lowered.error?.transportError?.kind == .bodyTooLarge)
        }
    }

    @Test("with followsRedirects false the redirect itself is the response")
    func redirectNotFollowed() async throws {
        try await withServer { server in
            let response = await LimitedFetch(
                server.baseURL + "/redirect/1",
                session: Session(),
                followsRedirects: false
            ).response()
            #expect(response.status == .found)
            #expect(response.headers[.location] == "/get")
            #expect(server.requests(path: "/get").isEmpty)
        }
    }
}
