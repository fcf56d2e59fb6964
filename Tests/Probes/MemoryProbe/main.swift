// brick-memory-probe [BYTES]
//
// For the test suite, in a process of its own (other tests running in parallel would add their
// own memory to a measurement made in the test process): starts a BrickTestServer on loopback,
// downloads BYTES (default 100 MiB) through CurlTransport to a file, samples the resident set on
// every progress callback, and prints one line:
//   status=200 size=BYTES before=RSS peak=RSS
import BrickRequest
import BrickTestServer
import Foundation
import Synchronization

/// Resident set size of this process in bytes, from /proc/self/status.
func residentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return (line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) * 1024
    }
    return 0
}

let size = CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 100 * 1024 * 1024
let path = NSTemporaryDirectory() + "brick-memory-probe-\(getpid()).bin"
defer { unlink(path) }
let server = try BrickTestServer.start()
let transport = CurlTransport()
let before = residentBytes()
let peak = Lock(before)
let options = TransportRequest.Options(
    destination: .file(path: path),
    progress: { _ in
        let now = residentBytes()
        peak.withLock { $0 = max($0, now) }
    }
)
let request = try TransportRequest(
    method: .get,
    url: server.baseURL + "/stream-bytes/\(size)?chunk_size=1048576",
    options: options
)
let response = try await transport.send(request)
let written = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
print("status=\(response.status.code) size=\(written) before=\(before) peak=\(peak.withLock { $0 })")
server.shutdown()
