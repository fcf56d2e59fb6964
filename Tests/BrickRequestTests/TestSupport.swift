@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import Foundation
import Testing

extension Transport {
    /// Sends and returns the result, never throwing (for asserting on errors).
    func result(_ request: TransportRequest) async -> Result<TransportResponse, TransportError> {
        do { return .success(try await send(request)) } catch { return .failure(error) }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// The calling thread, as a number that can be compared across threads.
/// The name the kernel shows for the calling thread ("brick-curl" on a transport's driver and
/// standby threads). Read from /proc, so that no optimizer can reuse a value read before an
/// `await` (as it may `pthread_self()`'s, which is declared `const`).
func currentThreadName() -> String {
    let text = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
    return text.trimmingCharacters(in: .newlines)
}

func currentThreadID() -> UInt { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(bitPattern: pthread_self()))) }

/// A validated GET brick whose body is read as `Data`, on a session of the test's own, with
/// optional header fields of its own.
final class SessionGet: Component, GETRequestType, NonAutoRetryType, ValidatedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    let headers: [String: String]
    init(url: String, session: Session, headers: [String: String] = [:]) {
        self.urlString = url
        self.session = session
        self.headers = headers
        super.init()
    }
}

/// A transport with the default configuration changed by `configure`.
func curlTransport(_ configure: (inout CurlTransport.Configuration) -> Void) -> CurlTransport {
    var configuration = CurlTransport.Configuration()
    configure(&configuration)
    return CurlTransport(configuration: configuration)
}

/// A transport whose standby thread takes the I/O over after `stallLimit`.
func curlTransport(stallLimit: Duration) -> CurlTransport {
    curlTransport { $0.stallLimit = stallLimit }
}

/// The thread on which `transport` runs its completions right now.
func completionThread(of transport: CurlTransport, request: TransportRequest) async -> UInt {
    await withCheckedContinuation { (continuation: CheckedContinuation<UInt, Never>) in
        _ = transport.start(request) { _ in continuation.resume(returning: currentThreadID()) }
    }
}

/// Waits for `semaphore` on a thread of its own, so that no cooperative thread waits (on Linux
/// `DispatchQueue.global()` is the cooperative pool's own queue: a wait there held one of its two
/// threads); returns whether it was signalled within `seconds` (generous: a bound, not a speed).
func signalled(_ semaphore: DispatchSemaphore, within seconds: Double = 60) async -> Bool {
    await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        Thread.detachNewThread {
            continuation.resume(returning: semaphore.wait(timeout: .now() + seconds) == .success)
        }
    }
}

func get(
    _ url: String,
    headers: [(name: String, value: String)] = [],
    options: TransportRequest.Options = .init()
) throws -> TransportRequest {
    try TransportRequest(method: .get, url: url, headers: headers, options: options)
}

func json(_ data: Data?) throws -> [String: Any] {
    let object = try JSONSerialization.jsonObject(with: try #require(data))
    return try #require(object as? [String: Any])
}

enum ProcessProbe {
    /// Open file descriptors of this process that are TCP sockets connected to `port` on loopback.
    static func socketDescriptors(connectedTo port: Int) -> Int {
        let inodes = tcpInodes(remotePort: port)
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return -1 }
        var count = 0
        for entry in entries {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"),
                target.hasPrefix("socket:["), let inode = UInt64(target.dropFirst(8).dropLast())
            else { continue }
            if inodes.contains(inode) { count += 1 }
        }
        return count
    }

    private static func tcpInodes(remotePort: Int) -> Set<UInt64> {
        var result = Set<UInt64>()
        for file in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            guard let text = readProcFile(file) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let columns = line.split(separator: " ")
                guard columns.count > 9 else { continue }
                let remote = columns[2].split(separator: ":")
                guard remote.count == 2, Int(remote[1], radix: 16) == remotePort, let inode = UInt64(columns[9]) else {
                    continue
                }
                result.insert(inode)
            }
        }
        return result
    }

    /// Reads a /proc file (they report a size of 0, so read until end of file).
    static func readProcFile(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd() else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Resident set size of this process in bytes.
    static func residentBytes() -> Int {
        guard let text = readProcFile("/proc/self/status") else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return kilobytes * 1024
        }
        return 0
    }
}

/// A temporary directory removed at the end of `body`.
func withTemporaryDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let path = NSTemporaryDirectory() + "brick-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}
