import Foundation
import NIOCore
import NIOHTTP1

/// One connection: collects each request, records it, then answers with the script or the route.
final class ConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = ByteBuffer

    private let state: ServerState
    private let connection: Int
    private var index = 0
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    /// A response is being produced (delays, drips); requests arriving meanwhile wait.
    private var busy = false
    private var queued: [(HTTPRequestHead, [UInt8])] = []

    init(state: ServerState, connection: Int) {
        self.state = state
        self.connection = connection
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.connectionClosed()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
        case .body(var buffer):
            body.append(contentsOf: buffer.readBytes(length: buffer.readableBytes) ?? [])
        case .end:
            guard let head else { return }
            self.head = nil
            queued.append((head, body))
            body = []
            serveNext(context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func serveNext(context: ChannelHandlerContext) {
        guard !busy, !queued.isEmpty else { return }
        let (head, body) = queued.removeFirst()
        busy = true
        index += 1
        let uri = head.uri
        let path = String(uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        let record = RecordedRequest(
            method: head.method.rawValue,
            uri: uri,
            path: path,
            headers: head.headers.map { ScriptedResponse.HeaderPair($0.name, $0.value) },
            body: body,
            connection: connection,
            indexOnConnection: index
        )
        let keepAlive = head.isKeepAlive
        let port = context.localAddress?.port ?? 0
        let scripted = state.received(record)
        if case .routeCutAfter(let bodyBytes) = scripted {
            guard case .script(.respond(let status, var headers, let body)) = Routes.answer(record, port: port, state: state) else {
                reset(context: context)
                return
            }
            headers.removeAll { $0.name.lowercased() == "content-length" }
            headers.append(.init("Content-Length", String(body.count)))
            let cut = Array(body.prefix(bodyBytes))
            let buffer = Self.response(status, headers, cut, keepAlive: keepAlive, allocator: context.channel.allocator)
            context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
                self.reset(context: context)
            }
            return
        }
        let step = scripted.map(Routes.Step.script) ?? Routes.answer(record, port: port, state: state)
        perform(step, keepAlive: keepAlive, context: context)
    }

    private func perform(_ step: Routes.Step, keepAlive: Bool, context: ChannelHandlerContext) {
        let loop = context.eventLoop.assumeIsolated()
        switch step {
        case .script(let scripted):
            perform(scripted, keepAlive: keepAlive, context: context)
        case .delayed(let delay, let then):
            loop.scheduleTask(in: Self.timeAmount(delay)) {
                self.perform(then, keepAlive: keepAlive, context: context)
            }
        case .chunked(let status, let headers, let count, let interval, let ending, let chunk):
            var head = "HTTP/1.1 \(status) \(Self.reason(status))\r\n"
            for header in headers { head += "\(header.name): \(header.value)\r\n" }
            head += "Transfer-Encoding: chunked\r\n"
            if !keepAlive { head += "Connection: close\r\n" }
            head += "\r\n"
            var buffer = context.channel.allocator.buffer(capacity: head.utf8.count)
            buffer.writeString(head)
            context.write(wrapOutboundOut(buffer), promise: nil)
            let pacing = Pacing(interval: interval, ending: ending)
            writeChunks(next: 0, count: count, pacing: pacing, chunk: chunk, keepAlive: keepAlive, context: context)
        }
    }

    /// How a chunked body's chunks are spaced and how it ends.
    private struct Pacing {
        var interval: Duration
        var ending: Routes.ChunkedEnding
    }

    private static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(duration.nanoseconds)
    }

    /// Writes one chunk, and the next only when it has been flushed: one chunk in memory at a time.
    private func writeChunks(
        next index: Int,
        count: Int,
        pacing: Pacing,
        chunk: @escaping @Sendable (Int) -> [UInt8],
        keepAlive: Bool,
        context: ChannelHandlerContext
    ) {
        guard index < count else {
            switch pacing.ending {
            case .finish:
                var end = context.channel.allocator.buffer(capacity: 5)
                end.writeString("0\r\n\r\n")
                finish(end, keepAlive: keepAlive, context: context)
            case .hold:
                break
            case .reset:
                reset(context: context)
            }
            return
        }
        var buffer = context.channel.allocator.buffer(capacity: 0)
        do {
            let bytes = chunk(index)
            buffer.reserveCapacity(bytes.count + 16)
            buffer.writeString(String(bytes.count, radix: 16) + "\r\n")
            buffer.writeBytes(bytes)
            buffer.writeString("\r\n")
        }
        context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { result in
            guard case .success = result else { return }
            // Continue from a fresh stack frame: a write that completes at once would otherwise
            // recurse and keep every earlier chunk alive.
            let next = {
                self.writeChunks(
                    next: index + 1,
                    count: count,
                    pacing: pacing,
                    chunk: chunk,
                    keepAlive: keepAlive,
                    context: context
                )
            }
            let loop = context.eventLoop.assumeIsolated()
            if pacing.interval == .zero {
                loop.execute(next)
            } else {
                loop.scheduleTask(in: Self.timeAmount(pacing.interval), next)
            }
        }
    }

    private func perform(_ scripted: ScriptedResponse, keepAlive: Bool, context: ChannelHandlerContext) {
        switch scripted {
        case .respond(let status, let headers, let body):
            finish(
                Self.response(status, headers, body, keepAlive: keepAlive, allocator: context.channel.allocator),
                keepAlive: keepAlive,
                context: context
            )
        case .resetBeforeResponse:
            reset(context: context)
        case .closeBeforeResponse:
            context.close(promise: nil)
        case .resetMidBody(let total, let sent):
            var buffer = context.channel.allocator.buffer(capacity: sent + 128)
            buffer.writeString(
                "HTTP/1.1 200 OK\r\nContent-Length: \(total)\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            buffer.writeBytes([UInt8](repeating: UInt8(ascii: "x"), count: sent))
            context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
                self.reset(context: context)
            }
        case .heldMidBody(let total, let sent, let gate):
            let first = min(max(0, sent), total)
            var head = context.channel.allocator.buffer(capacity: first + 128)
            head.writeString(
                "HTTP/1.1 200 OK\r\nContent-Length: \(total)\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            head.writeBytes([UInt8](repeating: UInt8(ascii: "*"), count: first))
            context.writeAndFlush(wrapOutboundOut(head), promise: nil)
            whenOpen(gate, context: context) {
                var rest = context.channel.allocator.buffer(capacity: total - first)
                rest.writeBytes([UInt8](repeating: UInt8(ascii: "*"), count: total - first))
                self.finish(rest, keepAlive: keepAlive, context: context)
            }
        case .routeCutAfter:
            reset(context: context)  // handled with the route in serveNext; not reached
        case .stall:
            break  // never answer; the client's timeout or cancellation ends it
        case .slowDrip(let total, let interval):
            var head = context.channel.allocator.buffer(capacity: 128)
            head.writeString(
                "HTTP/1.1 200 OK\r\nContent-Length: \(total)\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            context.writeAndFlush(wrapOutboundOut(head), promise: nil)
            drip(remaining: total, interval: interval, keepAlive: keepAlive, context: context)
        case .raw(let bytes):
            var buffer = context.channel.allocator.buffer(capacity: bytes.count)
            buffer.writeBytes(bytes)
            context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        case .rawKeepingConnection(let bytes):
            var buffer = context.channel.allocator.buffer(capacity: bytes.count)
            buffer.writeBytes(bytes)
            finish(buffer, keepAlive: true, context: context)
        case .held(let response, let gate):
            whenOpen(gate, context: context) { self.perform(response, keepAlive: keepAlive, context: context) }
        case .pushAfterResponse(let response, let bytes, let delay):
            perform(response, keepAlive: keepAlive, context: context)
            context.eventLoop.assumeIsolated().scheduleTask(in: Self.timeAmount(delay)) {
                guard context.channel.isActive else { return }
                var buffer = context.channel.allocator.buffer(capacity: bytes.count)
                buffer.writeBytes(bytes)
                let state = self.state
                context.writeAndFlush(self.wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
                    state.pushWritten()
                }
            }
        }
    }

    private func drip(remaining: Int, interval: Duration, keepAlive: Bool, context: ChannelHandlerContext) {
        guard remaining > 0 else {
            done(keepAlive: keepAlive, context: context)
            return
        }
        let nanos = interval.nanoseconds
        context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(nanos)) {
            guard context.channel.isActive else { return }
            var buffer = context.channel.allocator.buffer(capacity: 1)
            buffer.writeInteger(UInt8(ascii: "*"))
            context.writeAndFlush(self.wrapOutboundOut(buffer), promise: nil)
            self.drip(remaining: remaining - 1, interval: interval, keepAlive: keepAlive, context: context)
        }
    }

    private func reset(context: ChannelHandlerContext) {
        guard let provider = context.channel as? any SocketOptionProvider else {
            context.close(promise: nil)
            return
        }
        provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }

    private func finish(_ buffer: ByteBuffer, keepAlive: Bool, context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in
            self.done(keepAlive: keepAlive, context: context)
        }
    }

    /// Runs `action` on the connection's event loop once `gate` is open, if the connection is
    /// still up then.
    private func whenOpen(_ gate: ResponseGate, context: ChannelHandlerContext, _ action: @escaping () -> Void) {
        let opened = context.eventLoop.makePromise(of: Void.self)
        gate.whenOpen { opened.succeed() }
        opened.futureResult.assumeIsolated().whenSuccess {
            guard context.channel.isActive else { return }
            action()
        }
    }

    private func done(keepAlive: Bool, context: ChannelHandlerContext) {
        busy = false
        if keepAlive {
            serveNext(context: context)
        } else {
            context.close(promise: nil)
        }
    }

    static func response(
        _ status: Int,
        _ headers: [ScriptedResponse.HeaderPair],
        _ body: [UInt8],
        keepAlive: Bool,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        var head = "HTTP/1.1 \(status) \(reason(status))\r\n"
        var hasLength = false
        for header in headers {
            if header.name.lowercased() == "content-length" { hasLength = true }
            head += "\(header.name): \(header.value)\r\n"
        }
        if !hasLength { head += "Content-Length: \(body.count)\r\n" }
        if !keepAlive { head += "Connection: close\r\n" }
        head += "\r\n"
        var buffer = allocator.buffer(capacity: head.utf8.count + body.count)
        buffer.writeString(head)
        buffer.writeBytes(body)
        return buffer
    }

    static func reason(_ status: Int) -> String {
        HTTPResponseStatus(statusCode: status).reasonPhrase
    }
}

extension Duration {
    /// The duration in whole nanoseconds (the server's one conversion).
    fileprivate var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}
