import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import Synchronization
import Testing

@Suite("Backpressure: paced streams and server-sent events", .timeLimit(.minutes(2)))
struct BackpressureTests {
    @Test("a paced stream that pauses stops the transfer until it resumes, and a paused transfer is not idle")
    func pausedTransfer() async throws {
        try await withServer { server in
            let counts = Counts()
            let stream = ResponseBodyStream(paced: { bytes in
                counts.state.withLock { state in
                    state.bytes += bytes.count
                    state.pieces += 1
                    return state.pausing ? .pause : .more
                }
            })
            // An idle timeout far shorter than the pause: a paused transfer must not trip it. (Not
            // shorter than 1 s: under a sanitizer's slowdown the server may take longer than 200 ms
            // to answer at all.)
            let transport = curlTransport { $0.idleTimeout = .seconds(1) }
            let total = 4_000_000
            let request = try get(
                server.baseURL + "/stream-bytes/\(total)?chunk_size=65536",
                options: .init(destination: .stream(stream))
            )
            let task = Task { await transport.result(request) }
            await eventually { counts.state.withLock { $0.pieces } == 1 }
            // The barrier: a control transfer, started after the pause on the same transport (its
            // one thread), to a server that never answers. Once it has failed as idle, the paused
            // transfer has been still for longer than the idle timeout too, and the transport's
            // loop went round with the rest of the 4 MB waiting in the socket. No sleep.
            server.script("/stall", [.stall])
            let control = await transport.result(try get(server.baseURL + "/stall"))
            #expect(control.failure?.kind == .timedOut)
            #expect(control.failure?.message.contains("idle timeout") == true)
            // Paused after the first piece: nothing more arrived, and nothing failed.
            #expect(counts.state.withLock { $0.pieces } == 1)
            #expect(transport.activeTransferCount == 1)
            counts.state.withLock { $0.pausing = false }
            stream.resumeDelivery()
            let result = await task.childValue
            #expect(result.failure == nil, "\(String(describing: result.failure))")
            #expect(counts.state.withLock { $0.bytes } == total)
        }
    }

    @Test("events() holds a bounded number of events for a consumer that falls behind")
    func boundedEvents() async throws {
        try await withServer { server in
            let session = Session()
            let events = Ticks(server.baseURL + "/sse/10000", session: session).events()
            var iterator = events.makeAsyncIterator()
            let first = try await iterator.next()
            #expect(first?.id == "0")
            // The server writes all 10,000 events (~600 KB) at once; the consumer takes none. The
            // buffer fills to its mark; then three follow-up streams on the same session (its one
            // transport thread) run to their end: the transport's loop went round many times with
            // the rest of the 600 KB waiting in the socket, and took none of it.
            await eventually { events.bufferedEventCount >= 512 }
            for _ in 0..<3 {
                var followUp = 0
                for try await _ in Ticks(server.baseURL + "/sse/3", session: session).events() { followUp += 1 }
                #expect(followUp == 3)
            }
            let held = events.bufferedEventCount
            // 512 at most, plus the events of the one piece that crossed the mark (16 KiB).
            #expect(held <= 512 + 300, "\(held) events held")
            #expect(held > 0)
            var count = 1
            while let event = try await iterator.next() {
                #expect(event.id == "\(count)")
                count += 1
            }
            #expect(count == 10_000)
        }
    }

    @Test("a stream is not cut off by the transport's response size limit")
    func streamsAreNotCountedAgainstTheLimit() async throws {
        try await withServer { server in
            var configuration = Session.Configuration()
            configuration.transport.maxResponseSize = 10_000
            let session = Session(configuration: configuration)
            var count = 0
            for try await _ in Ticks(server.baseURL + "/sse/5000", session: session).events() { count += 1 }
            #expect(count == 5000)
        }
    }

    @Test("an event larger than 1 MiB ends the sequence with invalidResponse")
    func oversizedEvent() async throws {
        try await withServer { server in
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: small\r\n\r\ndata: "
            server.script("/huge", [.raw(Array(head.utf8) + Array(repeating: UInt8(ascii: "a"), count: 2 << 20))])
            var received: [String] = []
            var thrown: BrickError?
            do {
                for try await event in Ticks(server.baseURL + "/huge").events() { received.append(event.data) }
            } catch {
                thrown = error as? BrickError
            }
            #expect(received == ["small"])
            #expect(thrown?.code == .invalidResponse)
            #expect(thrown?.message.contains("longer than 1048576 bytes") == true)
        }
    }
}

/// What a paced stream saw, and whether it keeps pausing.
final class Counts: Sendable {
    let state = Lock((bytes: 0, pieces: 0, pausing: true))
}
