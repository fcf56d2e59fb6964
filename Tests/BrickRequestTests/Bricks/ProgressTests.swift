import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Dispatch
import Foundation
import Testing

/// A GET whose body is kept in memory.
final class Fetch: Component, GETRequestType, ValidatedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// A multipart upload of one file.
final class FileUpload: Component, POSTRequestType, MultipartRequestType, ValidatedResponseType, EmptyResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, file: URL, session: Session) {
        self.urlString = url
        self.session = session
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: "backup", name: "kind"))
        parameters.add(FileParameter(fileURL: file, name: "archive", mimeType: "application/octet-stream"))
        super.init(parameterBuilder: parameters)
    }
}

/// A progress report as a handler saw it, and whether it ran on the expected queue.
struct ProgressCall: Sendable {
    var progress: TransportRequest.Progress
    var onCallbackQueue: Bool
}

@Suite("Bricks: progress(_:)", .timeLimit(.minutes(2)))
struct ProgressTests {
    /// A serial callback queue that can tell whether code runs on it.
    static func markedQueue() -> (DispatchQueue, DispatchSpecificKey<Bool>) {
        let queue = DispatchQueue(label: "progress-tests.callbacks")
        let key = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: key, value: true)
        return (queue, key)
    }

    @Test("download progress runs on the callback queue, grows to the whole body, and ends before the response handler")
    func download() async throws {
        try await withServer { server in
            let (queue, key) = Self.markedQueue()
            let session = Session(configuration: .init(callbackQueue: .dispatch(queue)))
            let calls = Delivered<ProgressCall>()
            let callsSeenByResponse = Delivered<Int>()
            let responses = Delivered<Response<Data, BrickError>>()
            Fetch(server.baseURL + "/bytes/300000", session: session)
                .progress { progress in
                    calls.add(
                        ProgressCall(progress: progress, onCallbackQueue: DispatchQueue.getSpecific(key: key) == true)
                    )
                }
                .response { response in
                    callsSeenByResponse.add(calls.count)
                    responses.add(response)
                }
                .resume()
            let response = try await responses.first()
            let seenByResponse = try await callsSeenByResponse.first()
            // Anything reported after the response would have been queued behind it by now.
            await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
            let all = calls.all
            #expect(response.value?.count == 300_000)
            #expect(!all.isEmpty)
            #expect(seenByResponse == all.count)
            let offQueue = all.filter { !$0.onCallbackQueue }
            #expect(offQueue.isEmpty)
            #expect(all.last?.progress.bytesReceived == 300_000)
            #expect(all.last?.progress.totalBytesExpectedToReceive == 300_000)
            let received = all.map(\.progress.bytesReceived)
            #expect(received == received.sorted())
            // Only changes are reported: no two reports in a row are the same.
            let repeats = zip(all, all.dropFirst()).filter { $0.progress == $1.progress }
            #expect(repeats.isEmpty)
        }
    }

    @Test("upload progress reaches the whole multipart body, file part included")
    func upload() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/archive.bin")
                try Data(repeating: 7, count: 500_000).write(to: file)
                let calls = Delivered<TransportRequest.Progress>()
                let response = await FileUpload(server.baseURL + "/post", file: file, session: Session())
                    .progress { calls.add($0) }
                    .response()
                let last = calls.all.last
                #expect(response.status == .ok)
                #expect((last?.totalBytesExpectedToSend ?? 0) > 500_000)
                #expect(last?.bytesSent == last?.totalBytesExpectedToSend)
                let sent = calls.all.map(\.bytesSent)
                #expect(sent == sent.sorted())
            }
        }
    }

    @Test("the handler is let go once the request has started, so one that captures its request leaks nothing")
    func handlerReleased() async throws {
        final class Token: Sendable {}
        try await withServer { server in
            weak var weakToken: Token?
            let calls = Delivered<Int64>()
            let fetch = Fetch(server.baseURL + "/bytes/1000", session: Session())
            do {
                let token = Token()
                weakToken = token
                fetch.progress { progress in
                    withExtendedLifetime(token) { calls.add(progress.bytesReceived) }
                }
            }
            #expect(weakToken != nil)
            // The response is not kept: it holds the rendered request, and with it the handler.
            let count = await fetch.response().value?.count
            #expect(count == 1000)
            await eventually { weakToken == nil }
            #expect(weakToken == nil)
            #expect(calls.all.last == 1000)
            withExtendedLifetime(fetch) {}
        }
    }

    @Test("a stubbed request reports its whole body sent and the scripted body received, before response() returns")
    func stubbed() async throws {
        try await withTemporaryDirectory { directory in
            let file = URL(fileURLWithPath: directory + "/archive.bin")
            try Data(repeating: 7, count: 1000).write(to: file)
            let stub = StubTransport()
            stub.stub(.post, "/upload", StubResponse(status: .ok, body: Data("done".utf8)))
            let calls = Delivered<TransportRequest.Progress>()
            let (queue, _) = Self.markedQueue()
            let session = Session.testing(stub, configuration: .init(callbackQueue: .dispatch(queue)))
            // A busy callback queue: the report waits behind this, and `response()` must wait for it.
            queue.async { usleep(200_000) }
            let upload = FileUpload("https://api.example.com/upload", file: file, session: session)
            let response = await upload.progress { calls.add($0) }.response()
            let sentBody = try #require(stub.requests.first?.body)
            let sentLength = try sentBody.contentLength()
            let expected = TransportRequest.Progress(
                bytesReceived: 4,
                totalBytesExpectedToReceive: 4,
                bytesSent: sentLength,
                totalBytesExpectedToSend: sentLength
            )
            #expect(response.status == .ok)
            #expect(sentLength > 1000)
            #expect(calls.all == [expected])
        }
    }
}
