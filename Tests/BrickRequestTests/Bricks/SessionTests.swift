import BrickRequest
import BrickTestSupport
import BrickTesting
import Foundation
import Logging
import Synchronization
import Testing

final class RecordingMonitor: EventMonitor {
    let events = Lock<[String]>([])
    func requestDidStart(_ request: TransportRequest) { events.withLock { $0.append("start \(request.head.method)") } }
    func request(_ request: TransportRequest, didCompleteWith result: Result<TransportResponse, TransportError>) {
        events.withLock { $0.append("complete \((try? result.get())?.status.code ?? -1)") }
    }
    func requestDidFailToRender(_ error: BrickError) { events.withLock { $0.append("render \(error.code)") } }
}

/// An endpoint with the default retries (5 attempts, 5 s apart), as a newcomer's first one is.
final class RetryingUser: Component, GETRequestType, ValidatedResponseType, JSONResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/users/1" }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

final class StubbedUser: Component, GETRequestType, NonAutoRetryType, ValidatedResponseType, JSONResponseType {
    let session: Session
    var urlString: String { "https://api.example.com/users/1" }
    init(session: Session) {
        self.session = session
        super.init()
    }
}

@Suite("Session, StubTransport, ManualClock, errors", .timeLimit(.minutes(2)))
struct SessionTests {
    @Test("event monitors see start and completion")
    func monitors() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users/1", .json(#"{"name":"Ada"}"#))
        let monitor = RecordingMonitor()
        let session = Session(transport: stub, eventMonitors: [monitor])
        let user = try await StubbedUser(session: session).value
        #expect(user["name"].string == "Ada")
        #expect(monitor.events.withLock { $0 } == ["start GET", "complete 200"])
    }

    @Test("Session.testing: an endpoint that retries a 503 fails at once, its waits recorded, instead of hanging on a clock nobody advances")
    func retriesEndAtOnce() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users/1", .status(.serviceUnavailable))
        let clock = ImmediateClock()
        let response = await RetryingUser(session: Session.testing(stub, clock: clock)).response()
        #expect(response.error?.code == .unacceptableStatusCode)
        #expect(stub.requests.count > 1)
        #expect(clock.sleeps.count == stub.requests.count - 1)
        #expect(clock.sleeps.allSatisfy { $0 > .zero })
        // The default, with no clock given, ends as quickly.
        let other = StubTransport()
        other.stub(.get, "/users/1", .status(.serviceUnavailable))
        #expect(await RetryingUser(session: Session.testing(other)).response().error?.code == .unacceptableStatusCode)
        #expect(other.requests.count == stub.requests.count)
    }

    @Test("scripted sequences: each request takes the next response, the last repeats")
    func sequences() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users/*", .status(.serviceUnavailable), .json(#"{"name":"Ada"}"#))
        let session = Session.testing(stub)
        #expect(await StubbedUser(session: session).response().error?.code == .unacceptableStatusCode)
        #expect(try await StubbedUser(session: session).value["name"].string == "Ada")
        #expect(try await StubbedUser(session: session).value["name"].string == "Ada")
        #expect(stub.requests.count == 3)
    }

    @Test("a request with no script fails the test loudly (unimplemented by default)")
    func unimplemented() async throws {
        let stubLine = #line + 1
        let stub = StubTransport()
        let delivered = Delivered<Response<JSON, BrickError>>()
        // resume() hands the request to the transport synchronously, so the issue is recorded here,
        // and at the line that made the stub (not in StubTransport.swift).
        withKnownIssue("StubTransport has no script") {
            StubbedUser(session: Session.testing(stub)).response { delivered.add($0) }.resume()
        } matching: { issue in
            issue.sourceLocation?.line == stubLine && issue.sourceLocation?.fileName == "SessionTests.swift"
        }
        let response = try await delivered.first()
        #expect(response.error?.transportError?.message.contains("no stub for GET /users/1") == true)
    }

    @Test("handlers run one at a time in completion order, also when many wait in one batch")
    func handlerOrder() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        stub.stub(.get, "/users/1", StubResponse.json(#"{"name":"Ada"}"#).delayed(by: .seconds(1)))
        let queue = DispatchQueue(label: "handler-order")
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }  // holds the queue: every completion below joins one batch
        let session = Session.testing(stub, configuration: .init(callbackQueue: .dispatch(queue)))
        let order = Delivered<Int>()
        let names = Delivered<String?>()
        for index in 0..<20 {
            StubbedUser(session: session).response { response in
                order.add(index)
                names.add(response.value?["name"].string)
            }.resume()
        }
        // All twenty complete on this thread, in the order they were started.
        clock.advance(by: .seconds(1))
        #expect(order.count == 0)
        gate.signal()
        queue.sync {}
        #expect(order.all == Array(0..<20))
        #expect(names.all == Array(repeating: "Ada", count: 20))
    }

    @Test("a delayed response waits for the ManualClock, not for real time")
    func manualClock() async throws {
        let clock = ManualClock()
        let stub = StubTransport(clock: clock)
        stub.stub(.get, "/users/1", StubResponse.json(#"{"name":"Late"}"#).delayed(by: .seconds(30)))
        let session = Session.testing(stub)
        let task = Task { try await StubbedUser(session: session).value }
        await eventually { clock.waiterCount > 0 }
        clock.advance(by: .seconds(29))
        #expect(clock.waiterCount == 1)
        clock.advance(by: .seconds(1))
        #expect(try await task.childValue["name"].string == "Late")
        #expect(clock.now.offset == .seconds(30))
    }

    @Test("ManualClock runs scheduled actions in deadline order and wakes sleepers")
    func clockOrder() async throws {
        let clock = ManualClock()
        let order = Delivered<Int>()
        clock.schedule(at: clock.now.advanced(by: .seconds(3))) { order.add(3) }
        clock.schedule(at: clock.now.advanced(by: .seconds(1))) { order.add(1) }
        clock.schedule(at: clock.now.advanced(by: .seconds(2))) { order.add(2) }
        let sleeper = Task { try await clock.sleep(for: .seconds(10)) }
        await eventually { clock.waiterCount >= 4 }
        clock.advance(by: .seconds(2))
        #expect(order.all == [1, 2])
        clock.advance(by: .seconds(5))
        #expect(order.all == [1, 2, 3])
        #expect(clock.waiterCount == 1)
        clock.advance(by: .seconds(3))
        try await sleeper.childValue
        #expect(clock.now.offset == .seconds(10))
    }

    @Test("BrickError descriptions never show header values or bodies")
    func redaction() async throws {
        let stub = StubTransport()
        stub.stub(.get, "/users/1", StubResponse(status: .unauthorized, body: Data("secret-body-token".utf8)))
        let session = Session.testing(
            stub,
            configuration: .init(defaultHeaders: ["Authorization": "Bearer secret-header"])
        )
        let response = await StubbedUser(session: session).response()
        let error = try #require(response.error)
        #expect(error.code == .unacceptableStatusCode)
        #expect(!"\(error)".contains("secret"))
        #expect(error.responseBody == Data("secret-body-token".utf8))
        let headerError = await StubbedUser(
            session: Session.testing(stub, configuration: .init(defaultHeaders: ["X-Key": "secret\r\nInjected: 1"]))
        ).response().error
        #expect(headerError?.code == .invalidRequest)
        #expect(!"\(headerError!)".contains("secret"))
    }

    @Test("a BrickError from a transport failure says its sentence once, then what the transport adds")
    func oneSentence() {
        let transport = TransportError(.cannotConnect, message: "Failed to connect to 127.0.0.1 port 9", curlCode: 7, osErrno: 111)
        #expect("\(BrickError.transport(transport))" == "BrickError.cannotConnect: Failed to connect to 127.0.0.1 port 9 (curl 7) (errno 111)")
        // A cause with a message of its own is still shown whole.
        let wrapped = BrickError(.cannotConnect, message: "the proxy refused", underlying: transport)
        #expect("\(wrapped)".contains("[TransportError.cannotConnect: Failed to connect to 127.0.0.1 port 9 (curl 7) (errno 111)]"))
    }

    @Test("BrickError codes match in catch patterns and compare by code")
    func codes() {
        let error: any Error = BrickError(.timedOut, message: "slow")
        switch error {
        case BrickError.Code.timedOut: break
        default: Issue.record("pattern did not match")
        }
        #expect(BrickError(.cancelled, message: "x") == .cancelled)
        #expect(BrickError.transport(TransportError(.notConnected, message: "down")) == .notConnected)
    }

    @Test("the session describes a request as a curl command")
    func curlDescription() {
        let session = Session(configuration: .init(defaultHeaders: ["Accept": "application/json"]))
        let command = session.cURLDescription(for: StubbedUser(session: session))
        #expect(command.hasPrefix("curl 'https://api.example.com/users/1'"))
        #expect(command.contains("-H 'Accept: application/json'"))
    }

    @Test("JSON values subscript safely")
    func json() throws {
        let json = try JSON(
            data: Data(#"{"user":{"name":"Ada","age":36,"admin":true,"tags":["a","b"],"none":null}}"#.utf8)
        )
        #expect(json["user"]["name"].string == "Ada")
        #expect(json["user"]["age"].int == 36)
        #expect(json["user"]["admin"].bool == true)
        #expect(json["user"]["age"].bool == nil)
        #expect(json["user"]["tags"][1].string == "b")
        #expect(json["user"]["tags"][9].isNull)
        #expect(json["missing"]["deeper"].string == nil)
        #expect(json["user"]["none"].isNull)
    }
}
