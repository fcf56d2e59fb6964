@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestSupport
import Dispatch
import Foundation
import Glibc
import Synchronization
import Testing

/// How many requests a ``BurstServer`` has received.
private final class Arrivals: Sendable {
    let count = Mutex(0)
}

/// A server on 127.0.0.1 that holds every request until `count` have arrived, each on its own
/// connection, then writes all the responses back to back, in arrival order, and closes: the
/// client sees them complete in one round of its I/O.
private final class BurstServer: Sendable {
    let port: UInt16
    private let listener: Int32
    /// How many requests have arrived so far.
    let received = Arrivals()

    init(count: Int) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(listener, pointer, length) == 0 && listen(listener, 64) == 0
                    && getsockname(listener, pointer, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        port = UInt16(bigEndian: address.sin_port)
        let counter = received
        Thread.detachNewThread {
            var clients: [(Int32, String)] = []
            while clients.count < count {
                let client = accept(listener, nil, nil)
                guard client >= 0 else { return }
                var request: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !request.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
                    let read = recv(client, &buffer, buffer.count, 0)
                    if read <= 0 { break }
                    request += buffer[..<read]
                }
                let line = String(decoding: request.prefix { $0 != 13 }, as: UTF8.self)
                let path = line.split(separator: " ").dropFirst().first.map(String.init) ?? "/"
                clients.append((client, path))
                counter.count.withLock { $0 += 1 }
            }
            for (client, path) in clients {
                let body = Array(path.utf8)
                let head = "HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
                let bytes = Array(head.utf8) + body
                _ = bytes.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
            for (client, _) in clients { close(client) }
        }
    }

    deinit { close(listener) }

    var baseURL: String { "http://127.0.0.1:\(port)" }
}

@Suite("A blocking handler does not hold back the rest of its round", .timeLimit(.minutes(2)))
struct BlockedRoundTests {
    /// One round: a `response(_:)` handler that blocks until 16 tasks awaiting other responses of
    /// the same round have all got them (or 30 s pass); returns whether they got them while it
    /// blocked. Before the fix, the tasks' resumption waited behind the handler in the driver's
    /// round, and the handler's wait ran out.
    private func round(_ transport: CurlTransport) async throws -> Bool {
        let server = try BurstServer(count: 17)
        let session = Session(transport: transport)
        let arrived = DispatchSemaphore(value: 0)
        let handlerSawAll = Lock<Bool?>(nil)
        let handlerDone = DispatchSemaphore(value: 0)
        // The blocking request goes first, so that its response is first in the burst.
        SessionGet(url: server.baseURL + "/blocking", session: session).response { response in
            #expect(response.value.map { String(decoding: $0, as: UTF8.self) } == "/blocking")
            let deadline = DispatchTime.now() + 30
            var all = true
            for _ in 0..<16 where arrived.wait(timeout: deadline) != .success { all = false }
            handlerSawAll.withLock { $0 = all }
            handlerDone.signal()
        }.resume()
        // The first request reaches the server before the others are sent.
        await eventually { server.received.count.withLock { $0 } == 1 }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<16 {
                group.addTask {
                    let body = try await SessionGet(url: server.baseURL + "/awaited/\(index)", session: session).value
                    #expect(String(decoding: body, as: UTF8.self) == "/awaited/\(index)")
                    arrived.signal()
                }
            }
            try await group.waitForAll()
        }
        #expect(await signalled(handlerDone))
        return handlerSawAll.withLock { $0 } ?? false
    }

    @Test("a response(_:) handler blocking while 16 tasks await responses of the same round: each arrives while it blocks")
    func blockedHandlerDoesNotHoldBackAwaitingTasks() async throws {
        let transport = curlTransport(stallLimit: .milliseconds(5))
        for _ in 0..<3 {
            #expect(try await round(transport))
        }
        #expect(transport.stallTakeoverCount >= 3)
    }

    @Test("the same with awaiting tasks going on at the safe point (opt-in)")
    func blockedHandlerWithCapture() async throws {
        let transport = curlTransport {
            $0.stallLimit = .milliseconds(5)
            $0.resumesTasksAtSafePoint = true
        }
        for _ in 0..<3 {
            #expect(try await round(transport))
        }
    }
}
