// brick-memory-probe [BYTES]
// brick-memory-probe cached-endless
//
// For the test suite, in a process of its own (other tests running in parallel would add their
// own memory to a measurement made in the test process): starts a BrickTestServer on loopback,
// downloads BYTES (default 100 MiB) through CurlTransport to a file, samples the resident set on
// every progress callback, and prints one line:
//   status=200 size=BYTES before=RSS peak=RSS
// With `cached-endless`: a cached GET (body to memory) of a 160 MiB body, over the endpoint's
// 128 MiB response limit; prints `error=CODE limit=BYTES before=RSS peak=HWM` (the kernel's
// high-water mark of the resident set).
// With `h2-flood URL CAFILE`: a GET over HTTP/2 of a hostile server's flood (PING or CONTINUATION
// frames without end), through CurlTransport with no retry; prints `error=KIND before=RSS peak=HWM`
// and the error's message on a line of its own.
import BrickHAR
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

/// The resident set's high-water mark in bytes, from /proc/self/status.
func peakResidentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return (line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) * 1024
    }
    return 0
}

/// A cached GET whose body goes to memory, with a 128 MiB limit.
final class CachedDownload: Component, GETRequestType, NonAutoRetryType, CachedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    var maxResponseSize: Int64? { 128 << 20 }
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

if CommandLine.arguments.dropFirst().first == "cached-endless" {
    let server = try BrickTestServer.start()
    let session = Session()
    let before = residentBytes()
    let download = CachedDownload(server.baseURL + "/stream-bytes/\(160 << 20)?chunk_size=1048576", session: session)
    let response = await download.response()
    let code = response.error.map { "\($0.code)" } ?? "none"
    print("error=\(code) limit=\(download.maxResponseSize ?? 0) before=\(before) peak=\(peakResidentBytes())")
    server.shutdown()
    exit(0)
}

/// A GET whose 4 MiB body goes to memory, on the session given.
final class BigGet: Component, GETRequestType, NonAutoRetryType, DataResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// A download to a file, on the session given.
final class BigDownload: Component, GETRequestType, NonAutoRetryType, DownloadResponseType {
    let urlString: String
    let session: Session
    let downloadDestination: URL
    init(_ url: String, session: Session, to path: String) {
        self.urlString = url
        self.session = session
        self.downloadDestination = URL(fileURLWithPath: path)
        super.init()
    }
}

// A default flight recorder (16 MiB, 64 KiB bodies) on a session that answers COUNT bodies of
// 4 MiB, then three 100 MiB downloads: what it keeps must stay within its bound, not the bodies.
if CommandLine.arguments.dropFirst().first == "recorder", CommandLine.arguments.count == 3, let count = Int(CommandLine.arguments[2]) {
    let server = try BrickTestServer.start()
    let recorder = HARRecorder()
    let session = Session(configuration: .init(), instruments: [recorder])
    let before = residentBytes()
    var statuses: Set<Int> = []
    for _ in 0..<count {
        statuses.insert(await BigGet(server.baseURL + "/stream-bytes/\(4 << 20)?chunk_size=1048576", session: session).response().status?.code ?? 0)
    }
    let afterBodies = residentBytes()
    let file = NSTemporaryDirectory() + "brick-recorder-probe-\(getpid()).bin"
    for _ in 0..<3 {
        statuses.insert(await BigDownload(server.baseURL + "/stream-bytes/\(100 << 20)?chunk_size=1048576", session: session, to: file).response().status?.code ?? 0)
    }
    unlink(file)
    print("statuses=\(statuses.sorted().map(String.init).joined(separator: ",")) kept=\(recorder.byteCount) exchanges=\(recorder.exchanges.count) before=\(before) bodies=\(afterBodies) downloads=\(residentBytes())")
    server.shutdown()
    exit(0)
}

if CommandLine.arguments.dropFirst().first == "h2-flood", CommandLine.arguments.count == 4 {
    var configuration = CurlTransport.Configuration()
    configuration.tls.caFile = CommandLine.arguments[3]
    configuration.idleTimeout = .seconds(10)
    let transport = CurlTransport(configuration: configuration)
    let before = residentBytes()
    let kind: String
    var message = ""
    do {
        let response = try await transport.send(try TransportRequest(method: .get, url: CommandLine.arguments[2]))
        kind = "none(status \(response.status.code))"
    } catch {
        kind = "\(error.kind)"
        message = error.message
    }
    print("error=\(kind) before=\(before) peak=\(peakResidentBytes())\n# \(message)")
    exit(0)
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
