import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

/// A download endpoint: the body goes to `destination`.
final class Download: Component, GETRequestType, ValidatedResponseType, DownloadResponseType {
    let urlString: String
    let downloadDestination: URL
    let session: Session
    let autoRetryConfiguration: AutoRetryConfiguration
    init(_ url: String, to destination: URL, session: Session, retry: AutoRetryConfiguration = .none) {
        self.urlString = url
        self.downloadDestination = destination
        self.session = session
        self.autoRetryConfiguration = retry
        super.init()
    }
}

/// A download that accepts only some content types.
final class TypedDownload: Component, GETRequestType, ValidatedResponseType, DownloadResponseType {
    let urlString: String
    let downloadDestination: URL
    let acceptableContentTypes: [String]?
    let session = Session()
    init(_ url: String, to destination: URL, accepting types: [String]) {
        self.urlString = url
        self.downloadDestination = destination
        self.acceptableContentTypes = types
        super.init()
    }
}

/// An endpoint whose body is lent to a stream, piece by piece, through the `responseDestination`
/// requirement.
final class Feed: Component, GETRequestType, ValidatedResponseType, EmptyResponseType {
    let urlString: String
    let session: Session
    let pieces = Pieces()
    var responseDestination: TransportRequest.ResponseDestination { .stream(pieces.stream) }
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

@Suite("Bricks: bodies to a file (DownloadResponseType) or to a stream", .timeLimit(.minutes(2)))
struct DownloadTests {
    /// The bytes of the test server's `/bytes`, `/stream-bytes` and `/range` routes.
    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0) } }

    /// A download that retries once a second (on the session's clock), running in a task.
    static func retryingDownload(
        _ url: String,
        to file: URL,
        session: Session
    ) -> Task<Response<URL, BrickError>, Never> {
        Task { await Download(url, to: file, session: session, retry: .init(breakTime: .seconds(1))).response() }
    }

    @Test("a download's value is the file, which holds the whole body; the response holds none")
    func toFile() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/bytes.bin")
                let response = await Download(
                    server.baseURL + "/stream-bytes/300000?chunk_size=10000",
                    to: file,
                    session: Session()
                ).response()
                let written = try Data(contentsOf: file)
                #expect(response.value == file)
                #expect(response.data == nil)
                #expect(Array(written) == Self.pattern(300_000))
            }
        }
    }

    @Test("a download cut off mid-body is continued by the retry from where it stopped, not started over")
    func retryContinues() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let clock = ManualClock()
                server.script("/range/300000", [.routeCutAfter(bodyBytes: 100_000)])
                let file = URL(fileURLWithPath: directory + "/big.bin")
                let session = Session(clock: clock)
                let task = Self.retryingDownload(server.baseURL + "/range/300000", to: file, session: session)
                await eventually { clock.waiterCount == 1 }
                // While the request waits, the part received so far is kept beside the destination.
                let waiting = try FileManager.default.contentsOfDirectory(atPath: directory)
                let partial = try #require(waiting.first)
                let kept = try FileManager.default.attributesOfItem(atPath: directory + "/" + partial)[.size] as? Int
                #expect(waiting.count == 1)
                #expect(partial.hasPrefix("big.bin.brickpart-"))
                #expect(kept == 100_000)
                clock.advance(by: .seconds(1))
                let response = await task.value
                let written = try Data(contentsOf: file)
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(response.value == file)
                #expect(response.retryCount == 1)
                #expect(response.status == .partialContent)
                #expect(server.requests(path: "/range/300000").map { $0.header("Range") } == [nil, "bytes=100000-"])
                #expect(Array(written) == Self.pattern(300_000))
                #expect(entries == ["big.bin"])
            }
        }
    }

    @Test("a download whose retries run out, or that is cancelled while it waits, leaves no partial file")
    func partialDiscarded() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let clock = ManualClock()
                let session = Session(clock: clock)
                let retry = AutoRetryConfiguration(breakTime: .seconds(1), maxRetryCount: 1)
                server.script("/range/50000", [.routeCutAfter(bodyBytes: 10_000), .routeCutAfter(bodyBytes: 10_000)])
                let file = URL(fileURLWithPath: directory + "/out.bin")
                let exhausted = Task {
                    await Download(server.baseURL + "/range/50000", to: file, session: session, retry: retry).response()
                }
                await eventually { clock.waiterCount == 1 }
                clock.advance(by: .seconds(1))
                let failed = await exhausted.childValue
                let afterFailure = try FileManager.default.contentsOfDirectory(atPath: directory)

                server.script("/range/60000", [.routeCutAfter(bodyBytes: 10_000)])
                let download = Download(server.baseURL + "/range/60000", to: file, session: session, retry: retry)
                let responses = Delivered<Response<URL, BrickError>>()
                download.response { responses.add($0) }.resume()
                await eventually { clock.waiterCount == 1 }
                let whileWaiting = try FileManager.default.contentsOfDirectory(atPath: directory)
                download.cancel()
                let cancelledResponse = try await responses.first()
                let afterCancel = try FileManager.default.contentsOfDirectory(atPath: directory)

                #expect(failed.error?.code == .connectionLost)
                #expect(failed.retryCount == 1)
                #expect(afterFailure.isEmpty)
                #expect(whileWaiting.count == 1)
                #expect(cancelledResponse.error?.code == .cancelled)
                #expect(afterCancel.isEmpty)
            }
        }
    }

    @Test("a retried download that cannot be continued (no validator) starts the file over: one whole body")
    func retryStartsOver() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let clock = ManualClock()
                let session = Session(clock: clock)
                let body = Array(repeating: UInt8(ascii: "b"), count: 100_000)
                server.script(
                    "/backup",
                    [.resetMidBody(totalBytes: 100_000, sentBytes: 50_000), .respond(status: 200, body: body)]
                )
                let file = URL(fileURLWithPath: directory + "/backup.bin")
                let task = Self.retryingDownload(server.baseURL + "/backup", to: file, session: session)
                await eventually { clock.waiterCount == 1 }
                // The failed attempt's partial body is not left behind while the request waits.
                let waiting = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(waiting.isEmpty)
                clock.advance(by: .seconds(1))
                let response = await task.value
                #expect(response.retryCount == 1)
                let written = try Data(contentsOf: file)
                #expect(response.value == file)
                #expect(Array(written) == body)
            }
        }
    }

    @Test("a response that fails validation is an error; its body stays in the file")
    func validationFailure() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                server.script("/missing", [.respond(status: 404, body: Array("no such backup".utf8))])
                let file = URL(fileURLWithPath: directory + "/missing.bin")
                let response = await Download(server.baseURL + "/missing", to: file, session: Session()).response()
                #expect(response.error?.code == .unacceptableStatusCode)
                #expect(response.status == .notFound)
                let written = try Data(contentsOf: file)
                #expect(written == Data("no such backup".utf8))
            }
        }
    }

    @Test("a failed download leaves the file that was there untouched, and no partial file")
    func failureKeepsPrevious() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/backup.bin")
                try Data("yesterday".utf8).write(to: file)
                server.script("/backup", [.resetMidBody(totalBytes: 100_000, sentBytes: 50_000)])
                let response = await Download(server.baseURL + "/backup", to: file, session: Session()).response()
                let kept = try Data(contentsOf: file)
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(response.error?.code == .connectionLost)
                #expect(kept == Data("yesterday".utf8))
                #expect(entries == ["backup.bin"])
            }
        }
    }

    @Test(
        "a download to a full disk fails with a file error naming ENOSPC, not retried; the file that was there is intact, no partial file left",
        .enabled(if: getuid() == 0, "needs root to mount a small tmpfs")
    )
    func fullDisk() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let mountPoint = directory + "/small"
                try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
                try #require(Self.shell("mount -t tmpfs -o size=1m tmpfs '\(mountPoint)'") == 0, "mount failed")
                defer { _ = Self.shell("umount '\(mountPoint)'") }
                let file = URL(fileURLWithPath: mountPoint + "/backup.bin")
                try Data("yesterday".utf8).write(to: file)
                let response = await Download(
                    server.baseURL + "/bytes/4194304",
                    to: file,
                    session: Session(),
                    retry: .init(breakTime: .milliseconds(10))
                ).response()
                let error = try #require(response.error)
                #expect(error.code == .transport, "\(error)")
                let transport = try #require(error.underlying as? TransportError)
                #expect(transport.kind == .fileIO)
                #expect(transport.osErrno == ENOSPC, "\(transport)")
                #expect(response.retryCount == 0, "a full disk is not a network blip")
                #expect(server.requests(path: "/bytes/4194304").count == 1)
                #expect(try Data(contentsOf: file) == Data("yesterday".utf8))
                #expect(try FileManager.default.contentsOfDirectory(atPath: mountPoint) == ["backup.bin"])
            }
        }
    }

    /// Runs a shell command; its exit status.
    static func shell(_ command: String) -> Int32 {
        let status = system(command)
        return status == -1 ? -1 : (status >> 8) & 0xFF
    }

    @Test("the destination never holds a partial body: it appears whole, replacing the old file")
    func destinationAppearsWhole() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/drip.bin")
                let old = Data("old".utf8)
                try old.write(to: file)
                // The server sends 5 of the 20 bytes and holds the rest until the gate opens: a read
                // of the destination made before the test opens it is made mid-transfer, however
                // late a loaded machine runs the progress report that makes it.
                let gate = ResponseGate()
                server.script("/held", [.heldMidBody(totalBytes: 20, sentBytes: 5, until: gate)])
                let midTransfer = Delivered<Data>()
                let response = await Download(server.baseURL + "/held", to: file, session: Session())
                    .progress { progress in
                        guard progress.bytesReceived > 0, !gate.isOpen else { return }
                        midTransfer.add((try? Data(contentsOf: file)) ?? Data())
                        gate.open()
                    }
                    .response()
                let written = try Data(contentsOf: file)
                #expect(response.value == file)
                #expect(written == Data(repeating: UInt8(ascii: "*"), count: 20))
                #expect(midTransfer.count == 1)
                #expect(midTransfer.all.allSatisfy { $0 == old })
                #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["drip.bin"])
            }
        }
    }

    @Test("a cancelled download leaves the destination as it was, and no partial file")
    func cancelKeepsPrevious() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/slow.bin")
                try Data("before".utf8).write(to: file)
                let started = Delivered<Int64>()
                // 60 s for 50 bytes: the cancel always comes first, even on a loaded machine or under a
                // sanitizer (a 5 s drip once finished before a starved test got to cancel it).
                let download = Download(server.baseURL + "/drip?numbytes=50&duration=60", to: file, session: Session())
                let responses = Delivered<Response<URL, BrickError>>()
                download.progress { if $0.bytesReceived > 0 { started.add($0.bytesReceived) } }
                    .response { responses.add($0) }
                    .resume()
                _ = try await started.first()
                download.cancel()
                let response = try await responses.first()
                let kept = try Data(contentsOf: file)
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(response.error?.code == .cancelled)
                #expect(kept == Data("before".utf8))
                #expect(entries == ["slow.bin"])
            }
        }
    }

    @Test("a redirected download keeps only the final body, and no file of the first hop")
    func redirected() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/final.json")
                let response = await Download(server.baseURL + "/redirect/2", to: file, session: Session()).response()
                let written = try Data(contentsOf: file)
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                let echoed = try JSONSerialization.jsonObject(with: written) as? [String: Any]
                #expect(response.value == file)
                #expect(echoed?["url"] as? String == server.baseURL + "/get")
                #expect(entries == ["final.json"])
            }
        }
    }

    @Test("a download's content type is validated, though its body is in a file")
    func contentTypeValidated() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { directory in
                let file = URL(fileURLWithPath: directory + "/archive.zip")
                let refused = await TypedDownload(
                    server.baseURL + "/bytes/1000",
                    to: file,
                    accepting: ["application/zip"]
                ).response()
                let accepted = await TypedDownload(
                    server.baseURL + "/bytes/1000",
                    to: file,
                    accepting: ["application/octet-stream"]
                ).response()
                #expect(refused.error?.code == .unacceptableContentType)
                #expect(accepted.value == file)
            }
        }
    }

    @Test("a destination that is not a file URL is refused before any I/O")
    func notAFileURL() async throws {
        try await withServer { server in
            let response = await Download(
                server.baseURL + "/bytes/10",
                to: URL(string: "https://example.com/file.bin")!,
                session: Session()
            ).response()
            #expect(response.error?.code == .invalidRequest)
            #expect(response.error?.message.contains("file URL") == true)
            #expect(server.requests(path: "/bytes/10").isEmpty)
        }
    }

    @Test("an endpoint can lend its body to a stream through responseDestination")
    func toStream() async throws {
        try await withServer { server in
            let feed = Feed(server.baseURL + "/stream-bytes/200000?chunk_size=10000", session: Session())
            let response = await feed.response()
            #expect(response.error == nil)
            #expect(response.data == nil)
            #expect(feed.pieces.count > 1)
            #expect(feed.pieces.bytes == Self.pattern(200_000))
        }
    }

    @Test("with StubTransport a download's scripted body is written to the file")
    func stubbed() async throws {
        try await withTemporaryDirectory { directory in
            let stub = StubTransport()
            stub.stub(.get, "/backups/latest", StubResponse(status: .ok, body: Data("archive".utf8)))
            let file = URL(fileURLWithPath: directory + "/latest.tar")
            let value = try await Download(
                "https://api.example.com/backups/latest",
                to: file,
                session: .testing(stub)
            ).value
            let written = try Data(contentsOf: file)
            #expect(value == file)
            #expect(written == Data("archive".utf8))
        }
    }
}
