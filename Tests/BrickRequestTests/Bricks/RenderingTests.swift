import BrickRequest
import BrickTesting
import Foundation
import Testing

// Endpoints used by the rendering tests; every one runs through the real Session on a StubTransport.

protocol StubSessionRequestType: SessionRequestType {}

final class Search: Component, GETRequestType, StubSessionRequestType, DataResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/search?lang=en" }
    var headers: [String: String] { ["X-Trace": "t-1", "Accept": "application/json"] }
    init(session: Session, parameters: ParameterBuilder) {
        self.session = session
        super.init(parameterBuilder: parameters)
    }
}

final class CreateNote: Component, POSTRequestType, DataResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/notes" }
    init(session: Session, parameters: ParameterBuilder) {
        self.session = session
        super.init(parameterBuilder: parameters)
    }
}

final class DeleteNote: Component, DELETERequestType, EmptyResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/notes/9" }
    init(session: Session, parameters: ParameterBuilder) {
        self.session = session
        super.init(parameterBuilder: parameters)
    }
}

struct NotePayload: Encodable, Sendable {
    var title: String
    var pinned: Bool
}

final class PutNoteJSON: Component, PUTRequestType, JSONBodyRequestType, JSONResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/notes/9" }
    var jsonBody: NotePayload? { NotePayload(title: "Hi \"there\"", pinned: true) }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

/// A JSON body declared without the optional, as users write it.
final class PutNotePlain: Component, PUTRequestType, JSONBodyRequestType, StringResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/notes/plain" }
    var jsonBody: NotePayload { NotePayload(title: "plain", pinned: false) }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

/// A JSON body declared as an existential.
final class PutNoteExistential: Component, PUTRequestType, JSONBodyRequestType, StringResponseType {
    let session: Session
    let body: (any Encodable & Sendable)?
    var urlString: String { "https://api.example.com/notes/existential" }
    var jsonBody: (any Encodable & Sendable)? { body }
    init(session: Session, body: (any Encodable & Sendable)?) {
        self.session = session
        self.body = body
        super.init(parameterBuilder: { var p = ParameterBuilder(); p.add(TextParameter(value: "p", name: "from")); return p }())
    }
}

/// A JSON body whose declared type is not Encodable.
final class PutNoteNotEncodable: Component, PUTRequestType, JSONBodyRequestType, StringResponseType {
    struct Opaque: Sendable { var value = 1 }
    let session: Session
    var urlString: String { "https://api.example.com/notes/opaque" }
    var jsonBody: Opaque { Opaque() }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

final class PatchNoteJSONFromParameters: Component, PATCHRequestType, JSONBodyRequestType, StringResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/notes/9" }
    init(session: Session, parameters: ParameterBuilder) {
        self.session = session
        super.init(parameterBuilder: parameters)
    }
}

final class Upload: Component, POSTRequestType, MultipartRequestType, ValidatedResponseType, JSONResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/upload" }
    init(session: Session, parameters: ParameterBuilder) {
        self.session = session
        super.init(parameterBuilder: parameters)
    }
}

final class Ping: Component, HEADRequestType, EmptyResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/ping" }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

@Suite("Bricks render the exact request", .timeLimit(.minutes(2)))
struct RenderingTests {
    let stub = StubTransport()
    var session: Session {
        Session.testing(stub, configuration: .init(defaultHeaders: ["User-Agent": "Tests/1", "Accept": "*/*"]))
    }

    func send<R: ResponseType & Component>(_ request: R) async throws -> TransportRequest {
        _ = await request.response()
        return try #require(stub.requests.last)
    }

    @Test("GET: parameters in the query, RFC 3986 encoded, repeated names in order, headers merged and sorted")
    func getQuery() async throws {
        stub.stub(.get, "/search", .status(.ok))
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: "a b&c=d/é", name: "q"))
        parameters.add(TextParameter(value: 100, name: "n"))
        parameters.add(TextParameter(value: "1", name: "tag"))
        parameters.add(TextParameter(value: "2", name: "tag"))
        parameters.add(TextParameter(value: String?.none, name: "missing"))
        parameters.add(TextParameter(value: true, name: "flag"))
        let request = try await send(Search(session: session, parameters: parameters))
        #expect(request.head.method == .get)
        #expect(
            request.urlString
                == "https://api.example.com/search?lang=en&q=a%20b%26c%3Dd%2F%C3%A9&n=100&tag=1&tag=2&flag=1"
        )
        #expect(
            request.head.headerFields.map { "\($0.name.rawName): \($0.value)" } == [
                "Accept: application/json", "User-Agent: Tests/1", "X-Trace: t-1",
            ]
        )
        #expect(request.body == nil)
    }

    @Test("POST: a form-urlencoded body")
    func postForm() async throws {
        stub.stub(.post, "/notes", .status(.created))
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: "Hello world", name: "title"))
        parameters.add(TextParameter(value: 2.5, name: "weight"))
        let request = try await send(CreateNote(session: session, parameters: parameters))
        #expect(request.head.method == .post)
        #expect(request.urlString == "https://api.example.com/notes")
        #expect(request.head.headerFields[.contentType] == "application/x-www-form-urlencoded")
        #expect(try request.body?.collectedData() == Data("title=Hello%20world&weight=2.5".utf8))
    }

    @Test("DELETE: parameters in the query")
    func deleteQuery() async throws {
        stub.stub(.delete, "/notes/9", .status(.noContent))
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: "soft", name: "mode"))
        let request = try await send(DeleteNote(session: session, parameters: parameters))
        #expect(request.head.method == .delete)
        #expect(request.urlString == "https://api.example.com/notes/9?mode=soft")
        #expect(request.body == nil)
    }

    @Test("JSON body brick: an Encodable body")
    func jsonBody() async throws {
        stub.stub(.put, "/notes/9", .json("{}"))
        let request = try await send(PutNoteJSON(session: session))
        #expect(request.head.method == .put)
        #expect(request.head.headerFields[.contentType] == "application/json")
        #expect(try request.body?.collectedData() == Data(#"{"pinned":true,"title":"Hi \"there\""}"#.utf8))
    }

    @Test("JSON body brick: a body declared without the optional, or as `any Encodable & Sendable`, is sent as declared; nil sends the parameters")
    func jsonBodySpellings() async throws {
        stub.stub(.put, "/notes/plain", .status(.ok))
        stub.stub(.put, "/notes/existential", .status(.ok), .status(.ok))
        let plain = try await send(PutNotePlain(session: session))
        #expect(try plain.body?.collectedData() == Data(#"{"pinned":false,"title":"plain"}"#.utf8))
        let existential = try await send(PutNoteExistential(session: session, body: NotePayload(title: "any", pinned: true)))
        #expect(try existential.body?.collectedData() == Data(#"{"pinned":true,"title":"any"}"#.utf8))
        let none = try await send(PutNoteExistential(session: session, body: nil))
        #expect(try none.body?.collectedData() == Data(#"{"from":"p"}"#.utf8))
    }

    @Test("JSON body brick: a declared body that is not Encodable fails the request with invalidRequest, unsent")
    func jsonBodyNotEncodable() async throws {
        let response = await PutNoteNotEncodable(session: session).response()
        #expect(response.error?.code == .invalidRequest)
        #expect(response.error?.message.contains("Opaque") == true)
        #expect(stub.requests.isEmpty)
    }

    @Test("JSON body brick: text parameters as an object")
    func jsonFromParameters() async throws {
        stub.stub(.patch, "/notes/9", .status(.ok))
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: "x", name: "title"))
        parameters.add(TextParameter(value: 3, name: "rank"))
        let request = try await send(PatchNoteJSONFromParameters(session: session, parameters: parameters))
        #expect(request.head.method == .patch)
        #expect(try request.body?.collectedData() == Data(#"{"rank":"3","title":"x"}"#.utf8))
    }

    @Test("multipart: text parts and a file part streamed from disk, exact bytes")
    func multipart() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/pic.png"
            try Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 1, 2]).write(to: URL(fileURLWithPath: path))
            stub.stub(.post, "/upload", .json("{}"))
            var parameters = ParameterBuilder()
            parameters.add(TextParameter(value: "cat", name: "title"))
            parameters.add(FileParameter(fileURL: URL(fileURLWithPath: path), name: "image", mimeType: "image/png"))
            let request = try await send(Upload(session: session, parameters: parameters))
            let contentType = try #require(request.head.headerFields[.contentType])
            #expect(contentType.hasPrefix("multipart/form-data; boundary="))
            let boundary = String(contentType.dropFirst("multipart/form-data; boundary=".count))
            // The file is a segment of its own: streamed, never loaded into the body.
            #expect(request.body?.segments.contains(.file(path: path)) == true)
            var expected = Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\ncat\r\n".utf8)
            expected.append(
                Data(
                    "--\(boundary)\r\nContent-Disposition: form-data; name=\"image\"; filename=\"pic.png\"\r\nContent-Type: image/png\r\n\r\n"
                        .utf8
                )
            )
            expected.append(Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 1, 2]))
            expected.append(Data("\r\n--\(boundary)--\r\n".utf8))
            #expect(try request.body?.collectedData() == expected)
        }
    }

    @Test("a file parameter switches automatic encoding to multipart")
    func automaticMultipart() async throws {
        stub.stub(.post, "/notes", .status(.ok))
        var parameters = ParameterBuilder()
        parameters.add(FileParameter(data: Data("abc".utf8), name: "f", fileName: "a.txt", mimeType: "text/plain"))
        let request = try await send(CreateNote(session: session, parameters: parameters))
        #expect(request.head.headerFields[.contentType]?.hasPrefix("multipart/form-data; boundary=") == true)
    }

    @Test("HEAD brick")
    func head() async throws {
        stub.stub(.head, "/ping", .status(.ok))
        let request = try await send(Ping(session: session))
        #expect(request.head.method == .head)
    }

    @Test("a header value with CR/LF fails rendering with invalidRequest and sends nothing")
    func headerInjection() async throws {
        let evil = Session.testing(stub, configuration: .init(defaultHeaders: ["X-Evil": "a\r\nInjected: 1"]))
        let response = await Search(session: evil, parameters: ParameterBuilder()).response()
        #expect(response.error?.code == .invalidRequest)
        #expect(stub.requests.isEmpty)
    }

    @Test("originOverride keeps path and query")
    func originOverride() async throws {
        stub.stub(.get, "/search", .status(.ok))
        let overridden = Session.testing(stub, configuration: .init(originOverride: "http://127.0.0.1:9"))
        let request = try await send(Search(session: overridden, parameters: ParameterBuilder()))
        #expect(request.urlString == "http://127.0.0.1:9/search?lang=en")
    }
}

@Suite("Parameters", .timeLimit(.minutes(2)))
struct ParameterTests {
    @Test("text parameters: String, nil, fallback (BrickRequest's cases)")
    func strings() {
        #expect(TextParameter(value: "abc", name: "s").string == "abc")
        #expect(TextParameter(value: String?.none, name: "s").string == nil)
        #expect(TextParameter(value: String?.none, name: "s", catchOnNil: { "cdf" }).string == "cdf")
        #expect(TextParameter(value: String?.none, name: "s").catchOnNil { "cdf" }.string == "cdf")
    }

    @Test("text parameters: Int and Bool")
    func numbers() {
        #expect(TextParameter(value: 100, name: "i").string == "100")
        #expect(TextParameter(value: Int?.none, name: "i").string == nil)
        #expect(TextParameter(value: Int?.none, name: "i", catchOnNil: { 100 }).string == "100")
        #expect(TextParameter(value: true, name: "b").string == "1")
        #expect(TextParameter(value: false, name: "b").string == "0")
        #expect(TextParameter(value: Bool?.none, name: "b").string == nil)
        #expect(TextParameter(value: Bool?.none, name: "b", catchOnNil: { true }).string == "1")
        #expect(TextParameter(value: UInt8(7), name: "u").string == "7")
        #expect(TextParameter(value: 1.5, name: "d").string == "1.5")
    }

    @Test("the builder keeps order and omits nil values")
    func builder() {
        var builder = ParameterBuilder()
        builder.add(TextParameter(value: "1", name: "a"))
        builder.add(TextParameter(value: String?.none, name: "b"))
        builder.add(TextParameter(value: "2", name: "a"))
        #expect(builder.textPairs.map { "\($0.name)=\($0.value)" } == ["a=1", "a=2"])
        #expect(builder.entries.count == 3)
    }
}
