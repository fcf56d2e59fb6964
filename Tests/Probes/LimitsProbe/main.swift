// brick-limits-probe MODE URL COUNT
//
// For the test suite's resource tests, run in a process of its own under a limit its parent sets
// (`ulimit -n`, `ulimit -v`) against a server in the parent, with the default CurlTransport:
//   connections: COUNT concurrent GETs of URL; prints `ok=… failed=… kinds=…`.
//   allocation:  COUNT concurrent GETs of URL, a response that announces 256 MiB and sends a few
//                bytes; prints `ok=… failed=… kinds=…` (the process must not abort).
//   unlimited:   as connections, with no connection limits: the process runs out of descriptors.
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
var configuration = CurlTransport.Configuration()
if arguments[1] == "unlimited" {
    configuration.maxConnections = nil
    configuration.maxConnectionsPerHost = nil
}
let transport = CurlTransport(configuration: configuration)
let request = try TransportRequest(method: .get, url: url)

/// The requests through completion handlers, with no task: when descriptors run out, Dispatch's
/// worker-pool monitor traps (it cannot open /proc/<tid>/stat), so this mode starts no pool thread.
func sendWithHandlers() -> [Result<Int, TransportError>] {
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

let results = arguments[1] == "unlimited" ? sendWithHandlers() : await withTaskGroup(of: Result<Int, TransportError>.self) { group in
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
