// brick-limits-probe MODE URL COUNT
//
// For the test suite's resource tests, run in a process of its own under a limit its parent sets
// (`ulimit -n`, `ulimit -v`) against a server in the parent, with the default CurlTransport:
//   connections: COUNT concurrent GETs of URL; prints `ok=… failed=… kinds=…`.
//   allocation:  COUNT concurrent GETs of URL, a response that announces 256 MiB and sends a few
//                bytes; prints `ok=… failed=… kinds=…` (the process must not abort).
//   unlimited:   as connections, with no connection limits: the process runs out of descriptors.
//   soak:        COUNT GETs of URL, 16 at a time; prints `at=N rss_kib=… threads=…` every 10,000.
// connections and unlimited also print `descriptors_before=… descriptors_after=…` (open descriptors
// before the transport was made and once it is gone) and `recovered=…` (a new transport's request
// afterwards succeeded).
// Every line of output is `name=value` pairs; the exit status is 0 unless the probe itself failed.
import BrickRequest
import FoundationEssentials
import Dispatch
import Glibc
import Synchronization

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[3]) else {
    print("usage: brick-limits-probe connections|allocation URL COUNT")
    exit(2)
}
let url = arguments[2]
let mode = arguments[1]
let configuration = {
    var configuration = CurlTransport.Configuration()
    if mode == "unlimited" {
        configuration.maxConnections = nil
        configuration.maxConnectionsPerHost = nil
    }
    return configuration
}()
let request = try TransportRequest(method: .get, url: url)

/// What the open descriptors are (their /proc/self/fd links, sorted; the listing's own included,
/// the same each time; Dispatch's anonymous descriptors left out).
func openDescriptors() -> [String] {
    guard let directory = opendir("/proc/self/fd") else { return ["unreadable"] }
    defer { closedir(directory) }
    var targets: [String] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name == "." || name == ".." { continue }
        var buffer = [CChar](repeating: 0, count: 512)
        let length = readlink("/proc/self/fd/" + name, &buffer, buffer.count - 1)
        let target = length > 0 ? String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        // Dispatch's own timer, event and epoll descriptors, which it makes lazily the first time
        // a timer or its thread pool needs one (this library makes none): not the transport's.
        if target.hasPrefix("anon_inode:[timerfd]") || target.hasPrefix("anon_inode:[eventfd]")
            || target.hasPrefix("anon_inode:[eventpoll]")
        {
            continue
        }
        // Sockets and pipes by kind, not by inode: the same kind of descriptor counts the same.
        targets.append(target.replacing(/:\[\d+\]/, with: ""))
    }
    return targets.sorted()
}

/// A status line of /proc/self/status (`VmRSS`, `Threads`) as a number.
func status(_ name: String) -> Int {
    guard let file = fopen("/proc/self/status", "r") else { return -1 }
    defer { fclose(file) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix(name + ":") {
            return Int(text.dropFirst(name.count + 1).split(whereSeparator: \.isWhitespace).first ?? "") ?? -1
        }
    }
    return -1
}

/// COUNT requests through one transport, 16 in flight, the curve of memory and threads printed.
func soak() async {
    let transport = CurlTransport()
    var done = 0
    var failures = 0
    while done < count {
        let batch = min(16, count - done)
        failures += await withTaskGroup(of: Int.self) { group in
            for _ in 0..<batch {
                group.addTask { ((try? await transport.send(request))?.status.code == 200) ? 0 : 1 }
            }
            var failed = 0
            for await result in group { failed += result }
            return failed
        }
        done += batch
        if done % 10_000 == 0 {
            print("at=\(done) rss_kib=\(status("VmRSS")) threads=\(status("Threads")) failed=\(failures)")
        }
    }
}

if mode == "soak" {
    await soak()
    exit(0)
}

// What a process opens once, whatever the number of transports (Dispatch's and the concurrency
// runtime's, libcurl's global state), opened by a first transport that stays alive throughout: the
// count before and after then differ only by what the transport under test left open.
let firstTransport = CurlTransport(configuration: configuration)
if mode != "allocation" {  // allocation's server scripts exactly COUNT answers
    _ = try? await firstTransport.send(request)
}
let descriptorsBefore = openDescriptors()

/// The open descriptors once at most `limit`, or after 10 s: a released transport shuts down on its
/// own thread, which closes its descriptors as it goes.
/// (`usleep`, not `Task.sleep`: Dispatch opens a timer descriptor of its own for the first sleep.)
func settledDescriptors(atMost limit: Int) -> [String] {
    var descriptors = openDescriptors()
    for _ in 0..<1000 where descriptors.count > limit {
        usleep(10_000)
        descriptors = openDescriptors()
    }
    return descriptors
}

/// The requests through completion handlers, with no task: when descriptors run out, Dispatch's
/// worker-pool monitor traps (it cannot open /proc/<tid>/stat), so this mode starts no pool thread.
func sendWithHandlers(_ transport: CurlTransport) -> [Result<Int, TransportError>] {
    let done = DispatchSemaphore(value: 0)
    let collected = Mutex<[Result<Int, TransportError>]>([])
    for _ in 0..<count {
        _ = transport.start(request) { result in
            collected.withLock { $0.append(result.map { $0.status.code }) }
            done.signal()
        }
    }
    for _ in 0..<count { done.wait() }
    return collected.withLock { $0 }
}

func sendInTasks(_ transport: CurlTransport) async -> [Result<Int, TransportError>] {
    await withTaskGroup(of: Result<Int, TransportError>.self) { group in
    for _ in 0..<count {
        group.addTask {
            do {
                let response = try await transport.send(request)
                return .success(response.status.code)
            } catch let error as TransportError {
                return .failure(error)
            } catch {
                return .failure(TransportError(.other, message: "\(error)"))
            }
        }
    }
    var all: [Result<Int, TransportError>] = []
    for await result in group { all.append(result) }
    return all
    }
}

/// The requests on a transport of their own, released when they are done (its driver thread then
/// closes every connection and handle).
func sendAll() async -> [Result<Int, TransportError>] {
    let transport = CurlTransport(configuration: configuration)
    return mode == "unlimited" ? sendWithHandlers(transport) : await sendInTasks(transport)
}

let results = await sendAll()
let descriptorsAfter = settledDescriptors(atMost: descriptorsBefore.count)
// A new transport works once the flood is over: one more try after a second if the first fails
// (on a loaded machine the parent's server may still be draining the flood); the first failure
// is printed either way.
var recoveryError = "none"
var recovered = false
for attempt in 0..<2 where !recovered {
    if attempt > 0 { try? await Task.sleep(for: .seconds(1)) }
    do {
        recovered = try await CurlTransport().send(request).status.code == 200
    } catch {
        if recoveryError == "none" { recoveryError = "\(error)".replacing(" ", with: "_") }
    }
}

var ok = 0
var kinds: [String: Int] = [:]
var example = ""
for result in results {
    switch result {
    case .success(200): ok += 1
    case .success(let status): kinds["status\(status)", default: 0] += 1
    case .failure(let error):
        kinds[error.kind.description, default: 0] += 1
        if example.isEmpty || error.kind == .outOfResources { example = error.description.replacing(" ", with: "_") }
    }
}
let summary = kinds.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
print("ok=\(ok) failed=\(count - ok) kinds=\(summary.isEmpty ? "none" : summary) example=\(example.isEmpty ? "none" : example)")
print("descriptors_before=\(descriptorsBefore.count) descriptors_after=\(descriptorsAfter.count) recovered=\(recovered) first_recovery_error=\(recoveryError)")
if descriptorsAfter != descriptorsBefore {
    print("open_before=\(descriptorsBefore.joined(separator: ",")) open_after=\(descriptorsAfter.joined(separator: ","))")
}
