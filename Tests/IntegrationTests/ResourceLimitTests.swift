import BrickTestServer
import BrickTestSupport
import Foundation
import Testing

/// The transport under a process's resource limits, each in a child process of its own that
/// starts under the limit (`ulimit` in the shell that runs it) and talks to a server in this one.
@Suite("Resource limits, in a process of their own", .timeLimit(.minutes(5)))
struct ResourceLimitTests {
    /// `brick-limits-probe`, built next to the test binary by `swift test`.
    static var probePath: String {
        URL(fileURLWithPath: LargeDownloadMemoryTests.probePath).deletingLastPathComponent()
            .appendingPathComponent("brick-limits-probe").path
    }

    /// The probe's `name=value` output.
    static func fields(_ output: String) -> [String: String] {
        Dictionary(
            output.split(whereSeparator: \.isWhitespace).compactMap { field -> (String, String)? in
                let parts = field.split(separator: "=", maxSplits: 1)
                return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
            },
            uniquingKeysWith: { _, last in last }
        )
    }

    @Test("1,000 concurrent requests with the default configuration all succeed under ulimit -n 64; no descriptor outlives the transport")
    func thousandUnderSixtyFourDescriptors() async throws {
        let server = try await BrickTestServer.start()
        defer { Task { await server.shutdown() } }
        // The default connection limit follows the descriptor limit: 20 connections under 64.
        let output = try await Subprocess.run("ulimit -n 64 && '\(Self.probePath)' connections '\(server.baseURL)/bytes/100' 1000")
        let result = Self.fields(output)
        #expect(result["ok"] == "1000", "\(output)")
        #expect(result["failed"] == "0", "\(output)")
        #expect(server.requestCount == 1002)  // and one before and one after, each on a transport of its own
        // Connections were reused and queued, not opened per request.
        #expect(server.connectionCount <= 25, "\(server.connectionCount) connections")
        #expect(Self.noDescriptorLeft(result), "\(output)")
        #expect(result["recovered"] == "true", "\(output)")
    }

    /// Whether the probe's transport left no descriptor open: as many as before it was made, or
    /// fewer (the first transport's idle connection may have been closed by the server meanwhile).
    static func noDescriptorLeft(_ result: [String: String]) -> Bool {
        guard let before = result["descriptors_before"].flatMap(Int.init),
            let after = result["descriptors_after"].flatMap(Int.init)
        else { return false }
        return before > 0 && after <= before
    }

    @Test("without connection limits, running out of descriptors is reported as EMFILE, not as a dead server")
    func descriptorsRunOut() async throws {
        let server = try await BrickTestServer.start()
        defer { Task { await server.shutdown() } }
        let output = try await Subprocess.run("ulimit -n 64 && '\(Self.probePath)' unlimited '\(server.baseURL)/bytes/100' 500")
        let result = Self.fields(output)
        let kinds = result["kinds"] ?? ""
        #expect(kinds.contains("outOfResources"), "\(output)")
        #expect(!kinds.contains("cannotConnect"), "\(output)")
        #expect(result["example"]?.contains("(errno_24)") == true, "\(output)")
        // Every descriptor is back once the transport is gone, and the next transport works.
        #expect(Self.noDescriptorLeft(result), "\(output)")
        #expect(result["recovered"] == "true", "\(output)")
    }

    @Test("100,000 requests on one transport: resident memory and thread count flat (the curve is printed)")
    func hundredThousandRequests() async throws {
        let server = try await BrickTestServer.start()
        defer { Task { await server.shutdown() } }
        let output = try await Subprocess.run("'\(Self.probePath)' soak '\(server.baseURL)/bytes/100' 100000")
        print("soak, every 10,000 requests:\n\(output)")
        let points = output.split(separator: "\n").map { Self.fields(String($0)) }
        try #require(points.count == 10, "\(output)")
        #expect(points.last?["failed"] == "0", "\(output)")
        let rss = points.compactMap { $0["rss_kib"].flatMap(Int.init) }
        let threads = points.compactMap { $0["threads"].flatMap(Int.init) }
        try #require(rss.count == 10 && rss.allSatisfy { $0 > 0 }, "\(output)")
        try #require(threads.count == 10 && threads.allSatisfy { $0 > 0 }, "\(output)")
        // After the first 20,000 (pools and caches warm), 80,000 more add less than 4 MiB...
        #expect(rss[9] - rss[1] < 4096, "RSS KiB every 10,000: \(rss)")
        // ...and no thread per request: a leak of one thread per 10,000 would add 8 by the end. A
        // loaded machine may make the runtime start one or two more workers once (seen: 6 → 7
        // with a second build beside the suite), which is not growth with the requests.
        #expect(threads.max()! - threads[1] <= 2, "threads every 10,000: \(threads)")
        #expect(server.requestCount == 100_000)
    }

    @Test("responses announcing 256 MiB each fail one by one under ulimit -v, and the process lives")
    func announcedLengthsUnderAnAddressSpaceLimit() async throws {
        let server = try await BrickTestServer.start()
        defer { Task { await server.shutdown() } }
        let lie = Array("HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n\r\nonly a few bytes".utf8)
        server.script("/big", Array(repeating: .raw(lie), count: 20))
        // 20 × 256 MiB reserved up front would need 5 GiB; the limit allows about 500 MB.
        let output = try await Subprocess.run(
            "ulimit -v 500000 && '\(Self.probePath)' allocation '\(server.baseURL)/big' 20"
        )
        let result = Self.fields(output)
        #expect(result["ok"] == "0", "\(output)")
        // Each is cut off after a few bytes: a lost connection, not the process.
        #expect(result["kinds"] == "connectionReset:20", "\(output)")
    }
}
