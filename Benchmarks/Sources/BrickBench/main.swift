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
//              (BRICK_BENCH_EXECUTOR=transport: the tasks prefer CurlTransport.taskExecutor)
//   transport  CurlTransport.start with completions on the driver thread (the floor of the stack)
//   stream     the same, but each body goes to a ResponseBodyStream that counts its bytes, so no
//              body is copied or kept (what the C peers do with bodies)
// BENCH_CA_FILE, when set, is trusted for https (compare.sh exports the server's certificate).
// The session carries BrickMetrics' and BrickTracing's instruments, with no metrics backend or
// tracer bootstrapped (what an application that links them and exports nothing pays);
// BRICK_BENCH_INSTRUMENTS=0 leaves them out.
import BrickMetrics
@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTracing
import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// Writes one line to standard error.
func printError(_ line: String) {
    var text = line + "\n"
    _ = text.withUTF8 { write(STDERR_FILENO, $0.baseAddress, $0.count) }
}

/// `value` with exactly `digits` decimals (what `%.Nf` prints), for non-negative finite values.
func fixed(_ value: Double, digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = Int((value * scale).rounded())
    let fraction = String(scaled % Int(scale))
    return "\(scaled / Int(scale))." + String(repeating: "0", count: digits - fraction.count) + fraction
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let requests = Int(arguments[2]), let concurrency = Int(arguments[3]), requests > 0,
    concurrency > 0
else {
    printError("usage: brick-bench URL REQUESTS CONCURRENCY")
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
// BRICK_BENCH_HANDOFF_SPIN_US overrides CurlTransport.Configuration.handOffSpin (microseconds).
if let spin = environment["BRICK_BENCH_HANDOFF_SPIN_US"].flatMap(Int.init) {
    configuration.handOffSpin = .microseconds(spin)
}
// BRICK_BENCH_STALL_LIMIT_US overrides CurlTransport.Configuration.stallLimit (microseconds; 0 makes
// the session's handlers hop to its Dispatch queue).
if let limit = environment["BRICK_BENCH_STALL_LIMIT_US"].flatMap(Int.init) {
    configuration.stallLimit = .microseconds(limit)
}
// BRICK_BENCH_RESUME_AT_SAFE_POINT=1 turns CurlTransport.Configuration.resumesTasksAtSafePoint on
// (opt-in: it installs the runtime's global-enqueue hook): tasks awaiting `value` then go on at
// the driver's safe point. The default resumes them on the global executor.
if environment["BRICK_BENCH_RESUME_AT_SAFE_POINT"] == "1" {
    configuration.resumesTasksAtSafePoint = true
}
let transport = CurlTransport(configuration: configuration)
// BRICK_BENCH_CALLBACK_QUEUE=transport runs response(_:) handlers on the transport's thread
// (CallbackQueue.transportThread, for handlers that never block); the default is the session's own
// serial queue, drained in batches.
let callbackQueue: CallbackQueue =
    environment["BRICK_BENCH_CALLBACK_QUEUE"] == "transport"
    ? .transportThread : .serial(label: "brick-bench.callbacks")
let instruments: [any RequestInstrument] =
    environment["BRICK_BENCH_INSTRUMENTS"] == "0" ? [] : [MetricsInstrument(), TracingInstrument()]
var sessionConfiguration = Session.Configuration(transport: configuration, callbackQueue: callbackQueue)
// BRICK_BENCH_EGRESS=public checks every connection and every request's reused connection against
// EgressPolicy.publicInternetOnly (the benchmark server's loopback address on its allow list).
if environment["BRICK_BENCH_EGRESS"] == "public" {
    sessionConfiguration.egressPolicy = .publicInternetOnly(allowing: ["127.0.0.0/8", "::1"])
}
let session = Session(
    configuration: sessionConfiguration,
    transport: transport,
    instruments: instruments
)

/// The benchmark's endpoint: a validated GET whose body is read as `Data`.
final class BenchGet: Component, GETRequestType, NonAutoRetryType, ValidatedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    init(url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// Bytes handed to the `stream` mode's receiver (only the driver thread adds to it).
let streamedBytes = Atomic<Int>(0)
let bodyStream = ResponseBodyStream { bytes in
    streamedBytes.add(bytes.count, ordering: .relaxed)
    return true
}

let request: TransportRequest
do {
    request =
        mode == "stream"
        ? try TransportRequest(method: .get, url: url, options: .init(destination: .stream(bodyStream)))
        : try TransportRequest(method: .get, url: url)
} catch {
    printError("brick-bench: \(error)")
    exit(2)
}

/// Progress of a run. After the first wave, only completions (on the transport's driver) or the
/// session's serial handlers touch it, one at a time.
final class Counters: @unchecked Sendable {  // mutated by one completion or serial handler at a time; `done` publishes the end
    var started = 0
    var ok = 0
    var failed = 0
    var lastError: String?
    let done = DispatchSemaphore(value: 0)
    let total: Int

    init(total: Int) { self.total = total }

    /// Records one outcome; returns whether another request should be started.
    func record(ok success: Bool, error: (any Error)? = nil) -> Bool {
        if success { ok += 1 } else { failed += 1 }
        if let error { lastError = "\(error)" }
        if ok + failed == total {
            done.signal()
            return false
        }
        guard started < total else { return false }
        started += 1
        return true
    }
}

let counters = Counters(total: requests)

@Sendable func launch() {
    _ = transport.start(request) { result in
        let ok = (try? result.get())?.status == .ok
        if counters.record(ok: ok, error: result.failure) { launch() }
    }
}

@Sendable func launchBrick() {
    BenchGet(url: url, session: session).response { response in
        if counters.record(ok: response.error == nil, error: response.error) { launchBrick() }
    }.resume()
}

func runAsync() async -> (ok: Int, failed: Int, lastError: BrickError?) {
    let executor: (any TaskExecutor)? =
        environment["BRICK_BENCH_EXECUTOR"] == "transport" ? transport.taskExecutor : nil
    return await withTaskGroup(of: (Int, Int, BrickError?).self) { group in
        let perTask = requests / concurrency
        let extra = requests % concurrency
        for index in 0..<min(concurrency, requests) {
            let count = perTask + (index < extra ? 1 : 0)
            group.addTask(executorPreference: executor) {
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
case "transport", "stream", "callback":
    // The first wave is started from this thread; every later request from where completions run.
    counters.started = wave  // written before any request exists; afterwards only the completion thread touches it
    for _ in 0..<wave { mode == "callback" ? launchBrick() : launch() }
    counters.done.wait()
    (okCount, failedCount, lastError) = (counters.ok, counters.failed, counters.lastError)
case "async":
    let result = await runAsync()
    (okCount, failedCount, lastError) = (result.ok, result.failed, result.lastError.map { "\($0)" })
default:
    printError("brick-bench: unknown BRICK_BENCH_MODE \(mode)")
    exit(2)
}
let elapsed = clock.now - start
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
if environment["BRICK_BENCH_VERBOSE"] != nil {
    printError("brick-bench: stall takeovers: \(transport.stallTakeoverCount)")
    if mode == "stream" { printError("brick-bench: streamed bytes: \(streamedBytes.load(ordering: .relaxed))") }
}
if let lastError {
    printError("brick-bench: last error: \(lastError)")
}
print(
    "requests=\(requests) ok=\(okCount) failed=\(failedCount) seconds=\(fixed(seconds, digits: 3)) rps=\(fixed(Double(okCount + failedCount) / seconds, digits: 1))"
)

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
