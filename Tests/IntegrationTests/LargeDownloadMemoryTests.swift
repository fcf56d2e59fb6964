import BrickTestSupport
import Foundation
import Testing

@Suite("A large download's memory, measured in a process of its own", .timeLimit(.minutes(5)))
struct LargeDownloadMemoryTests {
    /// `brick-memory-probe`, built next to the test binary by `swift test`.
    static var probePath: String { Subprocess.sibling("brick-memory-probe") }

    @Test("a 100 MiB download to a file keeps the process under 64 MiB resident")
    func hundredMebibytesToFile() async throws {
        let output = try await Subprocess.run("'\(Self.probePath)' 104857600")
        let fields = Dictionary(
            uniqueKeysWithValues: output.split(whereSeparator: \.isWhitespace).compactMap { field -> (String, Int)? in
                let parts = field.split(separator: "=")
                guard parts.count == 2, let value = Int(parts[1]) else { return nil }
                return (String(parts[0]), value)
            }
        )
        #expect(fields["status"] == 200, "\(output)")
        #expect(fields["size"] == 104_857_600, "\(output)")
        let peak = try #require(fields["peak"], "\(output)")
        // The server holds one chunk at a time; the client writes through to disk.
        #expect(peak < 64 * 1024 * 1024, "\(output)")
    }

    @Test("a default flight recorder (16 MiB) over 100 responses of 4 MiB and three 100 MiB downloads: the process grows by at most twice its bound")
    func flightRecorderKeepsToItsBound() async throws {
        let output = try await Subprocess.run("'\(Self.probePath)' recorder 100")
        var fields: [String: String] = [:]
        for field in output.split(whereSeparator: \.isWhitespace) {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        #expect(fields["statuses"] == "200", "\(output)")
        let bound = 16 << 20
        let kept = try #require(fields["kept"].flatMap(Int.init), "\(output)")
        let before = try #require(fields["before"].flatMap(Int.init), "\(output)")
        let bodies = try #require(fields["bodies"].flatMap(Int.init), "\(output)")
        let downloads = try #require(fields["downloads"].flatMap(Int.init), "\(output)")
        #expect(kept <= bound, "\(output)")
        // Before: each kept 64 KiB prefix held its whole 4 MiB buffer (+400 MiB here), and each
        // download was read whole (+100 MiB each).
        #expect(bodies - before <= 2 * bound, "\(output)")
        #expect(downloads - before <= 2 * bound, "\(output)")
    }

    @Test("a cached GET of a body over its 128 MiB limit: refused at the limit, and the process never holds much more than the limit")
    func cachedBodyOverTheLimit() async throws {
        let output = try await Subprocess.run("'\(Self.probePath)' cached-endless")
        var fields: [String: String] = [:]
        for field in output.split(whereSeparator: \.isWhitespace) {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        #expect(fields["error"] == "invalidResponse", "\(output)")
        let limit = try #require(fields["limit"].flatMap(Int.init), "\(output)")
        let before = try #require(fields["before"].flatMap(Int.init), "\(output)")
        let peak = try #require(fields["peak"].flatMap(Int.init), "\(output)")
        // The body in segments (one 8 MiB segment beyond it at most) and the server's chunk: never
        // a second copy of it while it grows (before: about twice the limit, ~250 MiB here).
        #expect(peak - before < limit + 48 * 1024 * 1024, "\(output)")
    }
}
