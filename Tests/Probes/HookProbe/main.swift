// brick-hook-probe MODE URL
//
// For the test suite: what a CurlTransport does to the Swift runtime's global-enqueue hook, in a
// process of its own (the hook is process-wide, so this cannot be observed inside the test
// process). Twenty awaited GETs of URL through a CurlTransport, then one line of `name=value` pairs.
//   default:     the default configuration.
//   opt-in:      `resumesTasksAtSafePoint = true`.
//   other-first: another hook (counting the jobs it sees) is installed first, then as opt-in.
// Prints `slot=empty|ours|other capture=true|false other_jobs=N on_driver=N`. Exit status 0 unless
// the probe itself failed.
@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import CRuntimeHook
import FoundationEssentials
import Glibc
import Synchronization

typealias Enqueue = @convention(thin) (UnownedJob) -> Void
typealias Hook = @convention(thin) (UnownedJob, Enqueue) -> Void

let otherJobs = Atomic<Int>(0)
let otherHook: Hook = { job, enqueue in
    otherJobs.add(1, ordering: .relaxed)
    enqueue(job)
}

let arguments = CommandLine.arguments
guard arguments.count == 3, ["default", "opt-in", "other-first"].contains(arguments[1]) else {
    print("usage: brick-hook-probe default|opt-in|other-first URL")
    exit(2)
}
let mode = arguments[1]
guard let symbol = dlsym(nil, "swift_task_enqueueGlobal_hook") else {
    print("slot=missing")
    exit(3)
}
let slot = symbol.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
let otherPointer = unsafeBitCast(otherHook, to: UnsafeMutableRawPointer.self)
if mode == "other-first" {
    guard brick_hook_install_if_empty(slot, otherPointer) != 0 else {
        print("slot=taken-before-probe")
        exit(3)
    }
}

var configuration = CurlTransport.Configuration()
if mode != "default" { configuration.resumesTasksAtSafePoint = true }
let transport = CurlTransport(configuration: configuration)
let request = try TransportRequest(method: .get, url: arguments[2])

/// The calling thread's name, read from /proc (`pthread_self()` is `const`: the optimizer may
/// reuse a value read before an `await`).
func threadName() -> String {
    let file = fopen("/proc/thread-self/comm", "r")
    defer { if let file { fclose(file) } }
    var buffer = [UInt8](repeating: 0, count: 32)
    let count = file.map { fread(&buffer, 1, buffer.count, $0) } ?? 0
    return String(decoding: buffer[..<count].prefix { $0 != 10 }, as: UTF8.self)
}

let onDriver = try await Task.detached {
    var count = 0
    for _ in 0..<20 {
        _ = try await transport.send(request)
        if threadName() == "brick-curl" { count += 1 }
    }
    return count
}.value

let current = brick_hook_load(slot)
let slotState = current == nil ? "empty" : (current == otherPointer ? "other" : "ours")
print(
    "slot=\(slotState) capture=\(transport.capturesResumedTasks) other_jobs=\(otherJobs.load(ordering: .relaxed)) on_driver=\(onDriver)"
)
