// brick-bench URL REQUESTS CONCURRENCY
//
// The client contract of ../shared/bench/README.md: exactly REQUESTS GETs of URL with CONCURRENCY in
// flight, every body read in full, one result line on stdout:
//   requests=N ok=N failed=N seconds=S rps=R
//
// BRICK_BENCH_MODE chooses the layer measured:
//   callback   (default) the full brick pipeline: a GET brick with DataResponseType and validation,
//              rendered, sent, validated and serialized, its handler run through response(_:) on the
//              session's callback queue, which starts the next request
//   async      the same brick through `try await request.value`, CONCURRENCY tasks in a task group
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
let mode = environment["BRICK_BENCH_MODE"] ?? "callback"

var configuration = CurlTransport.Configuration()
configuration.tls.caFile = environment["BENCH_CA_FILE"]
configuration.proxy = .none
// Send the request the C peers send: no User-Agent, no Accept-Encoding (each header costs libcurl
// 7.88 several thousand instructions to format). BRICK_BENCH_DEFAULTS=1 keeps the library defaults.
if environment["BRICK_BENCH_DEFAULTS"] == nil {
    configuration.userAgent = nil
    configuration.automaticDecompression = false
}
let transport = CurlTransport(configuration: configuration)
// BRICK_BENCH_CALLBACK_QUEUE=transport runs response(_:) handlers on the transport's thread
// (CallbackQueue.transportThread, for handlers that never block); the default is the session's own
// serial queue, drained in batches.
let callbackQueue: CallbackQueue =
    environment["BRICK_BENCH_CALLBACK_QUEUE"] == "transport"
    ? .transportThread : .serial(label: "brick-bench.callbacks")
let session = Session(
    configuration: .init(transport: configuration, callbackQueue: callbackQueue),
    transport: transport
)

/// The benchmark's endpoint: a validated GET whose body is read as `Data`.
final class BenchGet: Component, GETRequestType, ValidatedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    init(url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

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

/// Counters for the callback mode, touched only where handlers run (one serial queue or the driver thread).
final class BrickCounters: @unchecked Sendable {  // only the session's serial callback queue (or the driver thread) mutates it after the first wave
    var started = 0
    var ok = 0
    var failed = 0
    var lastError: BrickError?
    let done = DispatchSemaphore(value: 0)
}

let brickCounters = BrickCounters()

@Sendable func launchBrick() {
    BenchGet(url: url, session: session).response { response in
        switch response.result {
        case .success: brickCounters.ok += 1
        case .failure(let error):
            brickCounters.failed += 1
            brickCounters.lastError = error
        }
        if brickCounters.ok + brickCounters.failed == requests {
            brickCounters.done.signal()
        } else if brickCounters.started < requests {
            brickCounters.started += 1
            launchBrick()
        }
    }.resume()
}

func runAsync() async -> (ok: Int, failed: Int, lastError: BrickError?) {
    await withTaskGroup(of: (Int, Int, BrickError?).self) { group in
        let perTask = requests / concurrency
        let extra = requests % concurrency
        for index in 0..<min(concurrency, requests) {
            let count = perTask + (index < extra ? 1 : 0)
            group.addTask {
                var ok = 0
                var failed = 0
                var lastError: BrickError?
                for _ in 0..<count {
                    do throws(BrickError) {
                        _ = try await BenchGet(url: url, session: session).value
                        ok += 1
                    } catch {
                        failed += 1
                        lastError = error
                    }
                }
                return (ok, failed, lastError)
            }
        }
        var total = (ok: 0, failed: 0, lastError: BrickError?.none)
        for await (ok, failed, error) in group {
            total.ok += ok
            total.failed += failed
            total.lastError = error ?? total.lastError
        }
        return total
    }
}

let clock = ContinuousClock()
let start = clock.now
let wave = min(concurrency, requests)
var okCount = 0
var failedCount = 0
var lastError: String?
switch mode {
case "transport":
    // The first wave is started from this thread; every later request from the driver thread.
    counters.started = wave  // written before any transfer exists; afterwards only the driver thread touches it
    for _ in 0..<wave { launch() }
    counters.done.wait()
    (okCount, failedCount, lastError) = (counters.ok, counters.failed, counters.lastError.map { "\($0)" })
case "callback":
    brickCounters.started = wave  // written before any request exists; afterwards only the callback queue touches it
    for _ in 0..<wave { launchBrick() }
    brickCounters.done.wait()
    (okCount, failedCount, lastError) = (
        brickCounters.ok, brickCounters.failed, brickCounters.lastError.map { "\($0)" }
    )
case "async":
    let result = await runAsync()
    (okCount, failedCount, lastError) = (result.ok, result.failed, result.lastError.map { "\($0)" })
default:
    FileHandle.standardError.write(Data("brick-bench: unknown BRICK_BENCH_MODE \(mode)\n".utf8))
    exit(2)
}
let elapsed = clock.now - start
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
if let lastError {
    FileHandle.standardError.write(Data("brick-bench: last error: \(lastError)\n".utf8))
}
print(
    "requests=\(requests) ok=\(okCount) failed=\(failedCount) seconds=\(String(format: "%.3f", seconds)) rps=\(String(format: "%.1f", Double(okCount + failedCount) / seconds))"
)
