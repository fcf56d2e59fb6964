import BrickHAR
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

// 5 minutes: the bounds test is CPU-bound (12 s under ThreadSanitizer alone); CI runs the sanitizers
// at `nice 10` beside the main suite, where it had a tenth of a core and outlasted 2 minutes.
@Suite("HARRecorder, the flight recorder", .timeLimit(.minutes(5)))
struct HARRecorderTests {
    @Test("20,000 requests (66 times the limit): never more than the limit of exchanges nor the byte bound; the last ones kept, oldest first; bodies cut at the body limit")
    func bounded() throws {
        let recorder = HARRecorder(limit: 300, maxBytes: 256 << 10, bodyLimit: 4 << 10)
        var largest = (count: 0, bytes: 0)
        // 20,000, not 100,000: as many evictions as the bounds need, and under ThreadSanitizer on a
        // loaded machine 100,000 outlasted the suite's 2 minutes.
        for number in 0..<20_000 {
            let request = try TransportRequest(
                method: .post,
                url: "http://127.0.0.1:9/items/\(number)",
                headerFields: [.authorization: "Bearer PLANTED-RECORDER-SECRET"],
                body: RequestBody(segments: [.data(Data(count: number % 7 * 1024))])
            )
            let observer = try #require(recorder.observe(request, operation: nil))
            var sent = request
            observer.attemptWillStart(&sent, resendCount: 0)
            let body = Data(repeating: UInt8(number % 251), count: number % 13 * 1024)
            observer.attemptDidEnd(.success(TransportResponse(status: .ok, body: body)), request: sent, resendCount: 0)
            if number % 1000 == 999 {
                let exchanges = recorder.exchanges
                largest = (max(largest.count, exchanges.count), max(largest.bytes, recorder.byteCount))
            }
        }
        #expect(largest.count <= 300)
        #expect(largest.bytes <= 256 << 10)
        let kept = recorder.exchanges
        #expect(!kept.isEmpty)
        #expect(kept.last?.url == "http://127.0.0.1:9/items/19999")
        let numbers = kept.compactMap { Int($0.url.split(separator: "/").last ?? "") }
        #expect(numbers == Array(numbers.sorted()) && numbers == Array((20_000 - numbers.count)..<20_000))
        #expect(kept.allSatisfy { $0.responseBody.count <= 4 << 10 && ($0.requestBody?.count ?? 0) <= 4 << 10 })
        #expect(kept.allSatisfy { $0.requestHeaders[.authorization] == "REDACTED" })
    }

    @Test("on a session against the loopback server: each attempt kept as sent, written as valid HAR on demand, no secret in it; paused, nothing kept")
    func onASession() async throws {
        let recorder = HARRecorder(limit: 50, redaction: HARRedaction(queryParameters: ["sig"]))
        let session = Session(configuration: .init(), instruments: [recorder])
        let path = NSTemporaryDirectory() + "brick-recorder-" + UUID().uuidString + "/incident.har"
        try await withServer(prepare: { server in
            server.route("/orders") { _ in .respond(status: 200, headers: [.init("Content-Type", "application/json")], body: Array(#"{"orders":[]}"#.utf8)) }
        }) { server in
            for number in 0..<3 {
                let response = await ArchivedGet(
                    server.baseURL + "/orders?page=\(number)&sig=PLANTED-SIGNATURE",
                    session: session,
                    headers: ["Authorization": "Bearer PLANTED-BEARER"]
                ).response()
                #expect(response.status == .ok)
            }
            recorder.isRecording = false
            _ = await ArchivedGet(server.baseURL + "/orders?page=9", session: session).response()
            #expect(server.requestCount == 4)
        }
        #expect(recorder.exchanges.count == 3)
        try recorder.writeHAR(to: path)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(!text.contains("PLANTED"))
        let lines = try await checkedByPython([path])
        #expect(lines.map { $0["status"] as? Int } == [200, 200, 200])
        #expect(lines.map { ($0["url"] as? String)?.hasSuffix("sig=REDACTED") } == [true, true, true])
        #expect(lines.first?["text"] as? String == #"{"orders":[]}"#)
        let archive = try HARArchive(contentsOf: path)
        #expect(archive.exchanges.allSatisfy { $0.metrics.total > .zero && $0.metrics.httpVersion == .http1_1 })
    }

    @Test("FailureWriter: a failed request (a 503) writes the recorder's exchanges, failed attempts included, mode 0600, no secret; within the interval further failures write nothing; past it, a new file; the oldest past keepingFiles removed")
    func failureWriter() async throws {
        let directory = NSTemporaryDirectory() + "brick-failures-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let recorder = HARRecorder(limit: 50)
        let clock = ManualClock()
        let started = clock.now
        let writer = HARRecorder.FailureWriter(
            recorder, directory: directory, minimumInterval: .seconds(300), keepingFiles: 2,
            when: HARRecorder.FailureWriter.transportFailuresAndServerErrors, elapsed: { started.duration(to: clock.now) }
        )
        let session = Session(configuration: .init(), eventMonitors: [writer], instruments: [recorder])
        func files() throws -> [String] {
            writer.waitUntilWritten()
            return try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        }
        try await withServer(prepare: { server in
            server.route("/ok") { _ in .status(200) }
            server.route("/down") { _ in .status(503) }
        }) { server in
            let fine = await ArchivedGet(server.baseURL + "/ok", session: session, headers: ["Authorization": "Bearer PLANTED"]).response()
            #expect(fine.status == .ok)
            writer.waitUntilWritten()
            #expect(!FileManager.default.fileExists(atPath: directory), "a success writes nothing")

            let down = await ArchivedGet(server.baseURL + "/down", session: session, headers: ["Authorization": "Bearer PLANTED"]).response()
            #expect(down.status?.code == 503)
            let first = try files()
            #expect(first.count == 1 && first.allSatisfy { $0.hasPrefix("brick-failure-") && $0.hasSuffix(".har") }, "\(first)")
            let path = directory + "/" + first[0]
            let archive = try HARArchive(contentsOf: path)
            #expect(archive.exchanges.map { $0.response?.status.code } == [200, 503])
            #expect(!(try String(contentsOfFile: path, encoding: .utf8)).contains("PLANTED"))
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o600)

            // An outage: within the interval, one file however many failures.
            for _ in 0..<3 { _ = await ArchivedGet(server.baseURL + "/down", session: session).response() }
            #expect(try files().count == 1)
            #expect(writer.failuresNotWritten == 3)
            // Past it: a file each time; the third removes the oldest (keepingFiles 2).
            for _ in 0..<2 {
                clock.advance(by: .seconds(301))
                _ = await ArchivedGet(server.baseURL + "/down", session: session).response()
            }
            let kept = try files()
            #expect(writer.filesWritten == 3)
            #expect(kept.count == 2 && !kept.contains(first[0]), "\(kept)")
            #expect(writer.lastError == nil)
        }
    }
}
