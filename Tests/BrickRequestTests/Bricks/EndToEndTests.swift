import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

// BrickRequest's own httpbin tests, against the loopback server: GET and DELETE echo a text and a
// number parameter; multipart POST and PUT with text, number and a PNG file part arrive intact.

protocol LoopbackRequestType: RequestType {
    var server: BrickTestServer { get }
    var path: String { get }
}

extension LoopbackRequestType {
    var urlString: String { server.baseURL + path }
}

final class EchoGet: Component, GETRequestType, LoopbackRequestType, SoftAutoRetryType, JSONResponseType {
    let server: BrickTestServer
    var path: String { "/get" }
    init(server: BrickTestServer, text: String, number: Int) {
        self.server = server
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: text, name: "text"))
        parameters.add(TextParameter(value: number, name: "number"))
        super.init(parameterBuilder: parameters)
    }
}

final class EchoOnce: Component, GETRequestType, LoopbackRequestType, NonAutoRetryType, JSONResponseType {
    let server: BrickTestServer
    var path: String { "/get" }
    init(server: BrickTestServer) {
        self.server = server
        super.init()
    }
}

final class EchoDelete: Component, DELETERequestType, LoopbackRequestType, SoftAutoRetryType, JSONResponseType {
    let server: BrickTestServer
    var path: String { "/delete" }
    init(server: BrickTestServer, text: String, number: Int) {
        self.server = server
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: text, name: "text"))
        parameters.add(TextParameter(value: number, name: "number"))
        super.init(parameterBuilder: parameters)
    }
}

final class EchoUpload: Component, LoopbackRequestType, ValidatedResponseType, JSONResponseType {
    let server: BrickTestServer
    let method: HTTPRequest.Method
    var path: String { method == .post ? "/post" : "/put" }
    init(server: BrickTestServer, method: HTTPRequest.Method, png: URL) {
        self.server = server
        self.method = method
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: "string", name: "text"))
        parameters.add(TextParameter(value: 45, name: "number"))
        parameters.add(FileParameter(fileURL: png, name: "image", mimeType: "image/png"))
        super.init(parameterBuilder: parameters)
    }
}

struct Echo: Decodable, Sendable {
    var method: String
    var args: [String: String]
}

final class EchoDecodable: Component, GETRequestType, LoopbackRequestType, ValidatedResponseType, DecodableResponseType
{
    typealias Model = Echo
    let server: BrickTestServer
    let path: String
    var acceptableContentTypes: [String]? { ["application/json"] }
    init(server: BrickTestServer, path: String) {
        self.server = server
        self.path = path
        super.init()
    }
}

final class Stalling: Component, GETRequestType, LoopbackRequestType, DataResponseType {
    let server: BrickTestServer
    var path: String { "/stall" }
    init(server: BrickTestServer) {
        self.server = server
        super.init()
    }
}

/// A tiny valid PNG (1×1, RGBA), written to disk for the upload tests.
let tinyPNG = Data(
    base64Encoded:
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)!

@Suite("Bricks end to end against the loopback server", .timeLimit(.minutes(2)))
struct EndToEndTests {
    @Test("GET and DELETE echo a text and a number parameter")
    func getAndDelete() async throws {
        try await withServer { server in
            let get = try await EchoGet(server: server, text: "string", number: 45).value
            #expect(get["args"]["text"].string == "string")
            #expect(get["args"]["number"].string == "45")
            #expect(get["method"].string == "GET")
            let delete = try await EchoDelete(server: server, text: "string", number: 45).value
            #expect(delete["args"]["text"].string == "string")
            #expect(delete["args"]["number"].string == "45")
            #expect(delete["method"].string == "DELETE")
        }
    }

    @Test(
        "multipart POST and PUT with text, number and a PNG arrive intact",
        arguments: [HTTPRequest.Method.post, .put]
    )
    func multipartUpload(method: HTTPRequest.Method) async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let png = URL(fileURLWithPath: directory + "/image.png")
                try tinyPNG.write(to: png)
                let echo = try await EchoUpload(server: server, method: method, png: png).value
                #expect(echo["method"].string == method.rawValue)
                #expect(echo["form"]["text"].string == "string")
                #expect(echo["form"]["number"].string == "45")
                #expect(echo["files"]["image"]["filename"].string == "image.png")
                #expect(echo["files"]["image"]["content_type"].string == "image/png")
                #expect(echo["files"]["image"]["base64"].string.flatMap { Data(base64Encoded: $0) } == tinyPNG)
            }
        }
    }

    @Test("a Decodable endpoint decodes; validation failures keep the status and the body")
    func decodableAndValidation() async throws {
        try await withServer { server in
            let echo = try await EchoDecodable(server: server, path: "/anything?x=1").value
            #expect(echo.method == "GET")
            #expect(echo.args == ["x": "1"])

            server.script(
                "/teapot",
                [
                    .respond(
                        status: 418,
                        headers: [.init("Content-Type", "application/json")],
                        body: Array(#"{"e":1}"#.utf8)
                    )
                ]
            )
            let teapot = await EchoDecodable(server: server, path: "/teapot").response()
            #expect(teapot.error?.code == .unacceptableStatusCode)
            #expect(teapot.error?.status == HTTPResponse.Status(code: 418))
            #expect(teapot.error?.responseBody == Data(#"{"e":1}"#.utf8))
            #expect(teapot.status?.code == 418)

            server.script("/html", [.ok("<html/>", contentType: "text/html")])
            let html = await EchoDecodable(server: server, path: "/html").response()
            #expect(html.error?.code == .unacceptableContentType)

            server.script("/bad", [.ok(#"{"method": 5}"#, contentType: "application/json")])
            let bad = await EchoDecodable(server: server, path: "/bad").response()
            #expect(bad.error?.code == .serializationFailed)
            #expect(bad.error?.message.contains("method") == true)
        }
    }

    @Test("malformed JSON is a serialization error")
    func malformedJSON() async throws {
        try await withServer { server in
            server.script("/get", [.ok("{not json", contentType: "application/json")])
            let response = await EchoGet(server: server, text: "a", number: 1).response()
            #expect(response.error?.code == .serializationFailed)
            #expect(response.data == Data("{not json".utf8))
        }
    }

    @Test("cancel() in flight: the handler gets a cancellation error exactly once, the transfer stops")
    func cancelInFlight() async throws {
        try await withServer { server in
            server.script("/stall", [.stall])
            let request = Stalling(server: server)
            let delivered = Delivered<Response<Data, BrickError>>()
            request.response { delivered.add($0) }.resume()
            await eventually { server.requestCount > 0 }
            request.cancel()
            request.cancel()
            let response = try await delivered.first()
            #expect(response.error == .cancelled)
            #expect(request.state == .cancelled)
            #expect(delivered.count == 1)
            // The transfer really stopped: libcurl closed its connection.
            await eventually { server.openConnectionCount == 0 }
        }
    }

    @Test("cancel() before resume(): the handler is told once and nothing is sent")
    func cancelBeforeResume() async throws {
        try await withServer { server in
            let request = Stalling(server: server)
            let delivered = Delivered<Response<Data, BrickError>>()
            request.response { delivered.add($0) }
            request.cancel()
            request.resume()
            let response = try await delivered.first()
            #expect(response.error == .cancelled)
            #expect(delivered.count == 1)
            #expect(server.requestCount == 0)
        }
    }

    @Test("resume() without a handler still sends the request; a second resume() sends nothing")
    func resumeWithoutHandler() async throws {
        try await withServer { server in
            let request = EchoOnce(server: server)
            request.resume()
            request.resume()
            await eventually { server.requestCount >= 1 }
            let registered = EchoOnce(server: server)
            let delivered = Delivered<Response<JSON, BrickError>>()
            registered.response { delivered.add($0) }.resume()
            registered.resume()
            let first = try await delivered.first()
            #expect(first.error == nil)
            // The barrier: a follow-up request, started after every resume() above returned. Once
            // its response is back, a second send of either request would have been counted, and
            // a second delivery (on the same serial callback queue) made.
            #expect(await EchoOnce(server: server).response().error == nil)
            #expect(delivered.count == 1)
            #expect(server.requestCount == 3)
        }
    }

    @Test("cancelling the task awaiting value cancels the transfer")
    func taskCancellation() async throws {
        try await withServer { server in
            server.script("/stall", [.stall])
            let task = Task { () -> BrickError? in
                do throws(BrickError) {
                    _ = try await Stalling(server: server).value
                    return nil
                } catch {
                    return error
                }
            }
            await eventually { server.requestCount > 0 }
            task.cancel()
            #expect(await task.childValue == .cancelled)
        }
    }

    @Test("transport failures become BrickErrors with the transport error inside")
    func transportFailure() async throws {
        try await withServer { server in
            server.script("/get", [.resetBeforeResponse])
            let response = await EchoOnce(server: server).response()
            #expect(response.error?.code == .connectionLost)
            #expect(response.error?.transportError?.kind == .connectionReset)
        }
    }
}
