@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

@Suite("CurlTransport: partial downloads kept and continued", .timeLimit(.minutes(2)))
struct CurlTransportResumeTests {
    let transport = CurlTransport()

    /// The bytes of the test server's `/range/N` route.
    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0) } }

    /// Sends `request`, returning its error (`nil` when it succeeded).
    func failure(of request: TransportRequest) async -> TransportError? {
        do {
            _ = try await transport.send(request)
            return nil
        } catch {
            return error
        }
    }

    func options(_ path: String, keep: Bool = true, resuming: PartialDownload? = nil) -> TransportRequest.Options {
        var options = TransportRequest.Options(destination: .file(path: path))
        options.keepsPartialDownload = keep
        options.resumingDownload = resuming
        return options
    }

    @Test("a cut-off body is kept, then continued with Range and If-Range: the destination gets the whole body")
    func keptAndContinued() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/big.bin"
                server.script("/range/300000", [.routeCutAfter(bodyBytes: 100_000)])
                let error = await failure(of: try get(server.baseURL + "/range/300000", options: options(path)))
                let partial = try #require(error?.partialDownload)
                let kept = try Data(contentsOf: URL(fileURLWithPath: partial.path))
                #expect(partial.length == 100_000)
                #expect(partial.validator == "\"range-300000\"")
                #expect(Array(kept) == Array(Self.pattern(300_000)[..<100_000]))
                #expect(!FileManager.default.fileExists(atPath: path))

                let progress = Delivered<TransportRequest.Progress>()
                var resumed = options(path, resuming: partial)
                resumed.progress = { progress.add($0) }
                let response = try await transport.send(try get(server.baseURL + "/range/300000", options: resumed))
                let written = try Data(contentsOf: URL(fileURLWithPath: path))
                let second = try #require(server.requests(path: "/range/300000").last)
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(response.status == .partialContent)
                #expect(response.bodyFile == path)
                #expect(second.header("Range") == "bytes=100000-")
                #expect(second.header("If-Range") == "\"range-300000\"")
                #expect(Array(written) == Self.pattern(300_000))
                #expect(entries == ["big.bin"])
                // Progress counts the bytes the transfer started with.
                #expect(progress.all.last?.bytesReceived == 300_000)
                #expect(progress.all.last?.totalBytesExpectedToReceive == 300_000)
            }
        }
    }

    @Test("a resource that changed since (another ETag) is downloaded whole, not spliced")
    func changedResource() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/doc.bin"
                server.script("/range/50000", [.routeCutAfter(bodyBytes: 20_000)])
                let error = await failure(
                    of: try get(server.baseURL + "/range/50000?etag=v1", options: options(path))
                )
                let partial = try #require(error?.partialDownload)
                #expect(partial.validator == "\"v1\"")
                let response = try await transport.send(
                    try get(server.baseURL + "/range/50000?etag=v2", options: options(path, resuming: partial))
                )
                let written = try Data(contentsOf: URL(fileURLWithPath: path))
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(response.status == .ok)
                #expect(Array(written) == Self.pattern(50_000))
                #expect(entries == ["doc.bin"])
            }
        }
    }

    @Test("nothing is kept unless asked, or when the body cannot be continued (no validator)")
    func notKept() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/file.bin"
                server.script("/range/30000", [.routeCutAfter(bodyBytes: 10_000)])
                let unasked = await failure(
                    of: try get(server.baseURL + "/range/30000", options: options(path, keep: false))
                )
                // `/bytes` sends no ETag or Last-Modified: nothing to check a continuation against.
                server.script("/bytes/30000", [.routeCutAfter(bodyBytes: 10_000)])
                let noValidator = await failure(of: try get(server.baseURL + "/bytes/30000", options: options(path)))
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(unasked?.kind == .connectionReset)
                #expect(unasked?.partialDownload == nil)
                #expect(noValidator?.kind == .connectionReset)
                #expect(noValidator?.partialDownload == nil)
                #expect(entries.isEmpty)
            }
        }
    }

    @Test("a continuation that fails again keeps the file, grown, for the next try")
    func failsAgain() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/twice.bin"
                // The second request is answered with a 206 of the rest, itself cut off.
                server.script("/range/90000", [.routeCutAfter(bodyBytes: 30_000), .routeCutAfter(bodyBytes: 30_000)])
                let url = server.baseURL + "/range/90000"
                let first = try #require(await failure(of: try get(url, options: options(path)))?.partialDownload)
                let second = try #require(
                    await failure(of: try get(url, options: options(path, resuming: first)))?.partialDownload
                )
                let response = try await transport.send(try get(url, options: options(path, resuming: second)))
                let written = try Data(contentsOf: URL(fileURLWithPath: path))
                let ranges = server.requests(path: "/range/90000").map { $0.header("Range") }
                #expect(first.length == 30_000)
                #expect(second.path == first.path)
                #expect(second.length == 60_000)
                #expect(ranges == [nil, "bytes=30000-", "bytes=60000-"])
                #expect(response.status == .partialContent)
                #expect(Array(written) == Self.pattern(90_000))
            }
        }
    }

    @Test("a partial file that is not intact any more is not continued: the body starts over")
    func tamperedPartial() async throws {
        try await withTemporaryDirectory { directory in
            try await withServer { server in
                let path = directory + "/t.bin"
                server.script("/range/40000", [.routeCutAfter(bodyBytes: 10_000)])
                let url = server.baseURL + "/range/40000"
                let partial = try #require(await failure(of: try get(url, options: options(path)))?.partialDownload)
                try Data("shorter".utf8).write(to: URL(fileURLWithPath: partial.path))
                let response = try await transport.send(try get(url, options: options(path, resuming: partial)))
                let written = try Data(contentsOf: URL(fileURLWithPath: path))
                let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(response.status == .ok)
                #expect(server.requests(path: "/range/40000").last?.header("Range") == nil)
                #expect(Array(written) == Self.pattern(40_000))
                #expect(entries == ["t.bin"])
            }
        }
    }
}
