// brick-bench URL REQUESTS CONCURRENCY
//
// The client contract of ../shared/bench/README.md: exactly REQUESTS GETs of URL with CONCURRENCY in
// flight, every body read in full, one result line on stdout:
//   requests=N ok=N failed=N seconds=S rps=R
//
// BRICK_BENCH_MODE chooses the layer measured:
//   transport  CurlTransport.start with completions on the driver thread (the floor of the stack)
// BENCH_CA_FILE, when set, is trusted for https (compare.sh exports the server's certificate).
import BrickRequest
import Foundation
import Synchronization

let arguments = CommandLine.arguments
guard arguments.count == 4, let requests = Int(arguments[2]), let concurrency = Int(arguments[3]), requests > 0,
    concurrency > 0
else {
    FileHandle.standardError.write(Data("usage: brick-bench URL REQUESTS CONCURRENCY\n".utf8))
    exit(2)
}
let url = arguments[1]
let environment = ProcessInfo.processInfo.environment
let mode = environment["BRICK_BENCH_MODE"] ?? "transport"

var configuration = CurlTransport.Configuration()
configuration.tls.caFile = environment["BENCH_CA_FILE"]
configuration.proxy = .none
let transport = CurlTransport(configuration: configuration)

let request: TransportRequest
do {
    request = try TransportRequest(method: .get, url: url)
} catch {
    FileHandle.standardError.write(Data("brick-bench: \(error)\n".utf8))
    exit(2)
}

/// Counters touched only on the transport's driver thread, where every completion runs.
final class Counters: @unchecked Sendable {  // only the curl driver thread mutates it; `done` publishes the end
    var started = 0
    var ok = 0
    var failed = 0
    var lastError: TransportError?
    let done = DispatchSemaphore(value: 0)
}

let counters = Counters()

@Sendable func launch() {
    _ = transport.start(request) { result in
        switch result {
        case .success(let response) where response.status == .ok: counters.ok += 1
        case .success: counters.failed += 1
        case .failure(let error):
            counters.failed += 1
            counters.lastError = error
        }
        if counters.ok + counters.failed == requests {
            counters.done.signal()
        } else if counters.started < requests {
            counters.started += 1
            launch()
        }
    }
}

switch mode {
case "transport":
    break
default:
    FileHandle.standardError.write(Data("brick-bench: unknown BRICK_BENCH_MODE \(mode)\n".utf8))
    exit(2)
}

let clock = ContinuousClock()
let start = clock.now
// The first wave is started from this thread; every later request from the driver thread.
let wave = min(concurrency, requests)
counters.started = wave  // written before any transfer exists; afterwards only the driver thread touches it
for _ in 0..<wave { launch() }
counters.done.wait()
let elapsed = clock.now - start
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
if let error = counters.lastError {
    FileHandle.standardError.write(Data("brick-bench: last error: \(error)\n".utf8))
}
print(
    "requests=\(requests) ok=\(counters.ok) failed=\(counters.failed) seconds=\(String(format: "%.3f", seconds)) rps=\(String(format: "%.1f", Double(counters.ok + counters.failed) / seconds))"
)
