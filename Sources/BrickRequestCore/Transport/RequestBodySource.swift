import Synchronization

/// A request body produced while it is sent: an `AsyncSequence` of byte chunks, read as the
/// connection takes them. The sequence is not collected: at most ``bufferSize`` bytes wait between
/// it and the connection, and the sequence is not asked for more until they go out (backpressure).
///
/// ```swift
/// let body = RequestBodySource(length: nil, isReplayable: false) { uploadChunks() }
/// final class Upload: Component, POSTRequestType, DataResponseType {
///     var urlString: String { "https://api.example.com/upload" }
///     let requestBody: RequestBody?
///     init(_ body: RequestBodySource) {
///         requestBody = RequestBody(segments: [.stream(body)])
///         super.init()
///     }
/// }
/// ```
///
/// Without a `length`, HTTP/1.1 sends the body with chunked transfer coding. A source that is not
/// replayable is iterated once: a request whose body it is never goes out again once it started
/// (no retry, no `401` replay, no redirect that keeps the body — each fails or delivers the first
/// attempt's result instead). A replayable source makes a new sequence for every attempt.
///
/// Compared by identity.
public final class RequestBodySource: Sendable, Hashable {
    /// The body's length in bytes, or `nil` when unknown.
    public let length: Int64?
    /// Whether the source makes a new sequence for each attempt.
    public let isReplayable: Bool
    /// Bytes that may wait between the sequence and the connection.
    public let bufferSize: Int
    /// Iterates a new sequence into a pipe.
    private let pump: @Sendable (RequestBodyPipe) async -> Void
    /// Whether a sequence was made already.
    private let opened = Atomic(false)
    /// The most bytes that waited between a sequence and the connection (for tests of
    /// backpressure).
    package let largestBacklog = Atomic(0)

    /// Creates a source.
    ///
    /// - Parameters:
    ///   - length: The body's length in bytes, or `nil` when unknown. A sequence that ends at
    ///     another length fails the request.
    ///   - isReplayable: Whether `makeSequence` may be called once per attempt.
    ///   - bufferSize: Bytes that may wait between the sequence and the connection. Default 256 KiB.
    ///   - makeSequence: Makes the sequence of chunks (called when an attempt starts sending).
    public init<Chunks: AsyncSequence & Sendable>(
        length: Int64?,
        isReplayable: Bool,
        bufferSize: Int = 256 * 1024,
        _ makeSequence: @escaping @Sendable () -> Chunks
    ) where Chunks.Element == ArraySlice<UInt8> {
        self.length = length
        self.isReplayable = isReplayable
        self.bufferSize = max(1, bufferSize)
        self.pump = { pipe in
            do {
                for try await chunk in makeSequence() {
                    try await pipe.write(chunk)
                }
                pipe.finish()
            } catch {
                pipe.fail("the request body's source failed: \(error)")
            }
        }
    }

    /// Whether an attempt may (still) send this body.
    package var canBeSentAgain: Bool { isReplayable || !opened.load(ordering: .acquiring) }

    /// Starts a sequence feeding a new pipe, or `nil` when a single-pass source was used already.
    ///
    /// - Parameter resumeReader: Called (from the producer's task) when bytes arrive for a reader
    ///   that found the pipe empty.
    package func open(resumeReader: @escaping @Sendable () -> Void) -> RequestBodyPipe? {
        let first = opened.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        guard first || isReplayable else { return nil }
        let pipe = RequestBodyPipe(
            capacity: bufferSize,
            expectedLength: length,
            noteBacklog: { [weak self] backlog in self?.noteBacklog(backlog) },
            resumeReader: resumeReader
        )
        let pump = self.pump
        pipe.producer = Task { await pump(pipe) }
        return pipe
    }

    private func noteBacklog(_ backlog: Int) {
        var seen = largestBacklog.load(ordering: .relaxed)
        while backlog > seen {
            let (exchanged, current) = largestBacklog.compareExchange(
                expected: seen,
                desired: backlog,
                ordering: .relaxed
            )
            if exchanged { return }
            seen = current
        }
    }

    public static func == (lhs: RequestBodySource, rhs: RequestBodySource) -> Bool { lhs === rhs }

    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// The bytes between a ``RequestBodySource``'s sequence (the producer, in a task) and the
/// transport's read callback (the reader, on the driver's thread). One lock guards its state.
package final class RequestBodyPipe: Sendable {
    package enum ReadResult {
        /// This many bytes were copied.
        case bytes(Int)
        /// Nothing to read yet: the reader pauses until `resumeReader` is called.
        case pause
        /// The body is complete.
        case end
        /// The producer failed, or the body's length is not the one declared.
        case failed(String)
    }

    private struct State {
        var chunks: [ArraySlice<UInt8>] = []
        var head = 0
        var buffered = 0
        var produced: Int64 = 0
        var finished = false
        var failure: String?
        /// The transfer ended: the producer stops.
        var closed = false
        var readerPaused = false
        var spaceWaiter: CheckedContinuation<Void, any Error>?
    }

    private let state = Lock(State())
    private let capacity: Int
    private let expectedLength: Int64?
    private let resumeReader: @Sendable () -> Void
    private let noteBacklog: @Sendable (Int) -> Void
    /// The producer's task: written once by `open` and read by `close`, both on the driver's thread.
    nonisolated(unsafe) var producer: Task<Void, Never>?

    init(
        capacity: Int,
        expectedLength: Int64?,
        noteBacklog: @escaping @Sendable (Int) -> Void,
        resumeReader: @escaping @Sendable () -> Void
    ) {
        self.noteBacklog = noteBacklog
        self.capacity = capacity
        self.expectedLength = expectedLength
        self.resumeReader = resumeReader
    }

    /// Adds a chunk; suspends while more than the capacity waits. Throws once the transfer ended.
    func write(_ chunk: ArraySlice<UInt8>) async throws {
        guard !chunk.isEmpty else { return }
        let (wake, backlog) = try state.withLock { state -> (Bool, Int) in
            if state.closed { throw CancellationError() }
            state.chunks.append(chunk)
            state.buffered += chunk.count
            state.produced += Int64(chunk.count)
            defer { state.readerPaused = false }
            return (state.readerPaused, state.buffered)
        }
        noteBacklog(backlog)
        if wake { resumeReader() }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let outcome: Result<Void, any Error>? = state.withLock { state in
                if state.closed { return .failure(CancellationError()) }
                if state.buffered <= capacity { return .success(()) }
                state.spaceWaiter = continuation
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    /// The sequence ended.
    func finish() {
        let wake = state.withLock { state -> Bool in
            if let expectedLength, state.produced != expectedLength {
                state.failure = "the request body's source made \(state.produced) bytes, not the \(expectedLength) declared"
            }
            state.finished = true
            defer { state.readerPaused = false }
            return state.readerPaused
        }
        if wake { resumeReader() }
    }

    /// The sequence failed.
    func fail(_ reason: String) {
        let wake = state.withLock { state -> Bool in
            state.failure = state.failure ?? reason
            defer { state.readerPaused = false }
            return state.readerPaused
        }
        if wake { resumeReader() }
    }

    /// Copies up to `capacity` bytes into `buffer` (the reader, on the driver's thread).
    package func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> ReadResult {
        var copied = 0
        let (result, waiter) = state.withLock { state -> (ReadResult, CheckedContinuation<Void, any Error>?) in
            while copied < capacity, state.head < state.chunks.count {
                let chunk = state.chunks[state.head]
                let count = min(chunk.count, capacity - copied)
                chunk.withUnsafeBytes { bytes in
                    (buffer + copied).copyMemory(from: bytes.baseAddress!, byteCount: count)
                }
                copied += count
                if count == chunk.count {
                    state.head += 1
                } else {
                    state.chunks[state.head] = chunk.dropFirst(count)
                }
            }
            if state.head == state.chunks.count {
                state.chunks.removeAll(keepingCapacity: true)
                state.head = 0
            }
            state.buffered -= copied
            var waiter: CheckedContinuation<Void, any Error>? = nil
            if state.buffered <= self.capacity {
                waiter = state.spaceWaiter
                state.spaceWaiter = nil
            }
            if copied > 0 { return (.bytes(copied), waiter) }
            if let failure = state.failure { return (.failed(failure), waiter) }
            if state.finished { return (.end, waiter) }
            state.readerPaused = true
            return (.pause, waiter)
        }
        waiter?.resume()
        return result
    }

    /// The transfer ended (or rewinds): the producer's writes fail from now on, and its task is
    /// cancelled.
    package func close() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.closed = true
            defer { state.spaceWaiter = nil }
            return state.spaceWaiter
        }
        waiter?.resume(throwing: CancellationError())
        producer?.cancel()
    }
}
