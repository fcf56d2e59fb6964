import FoundationEssentials
import Glibc
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Response-body buffers, recycled instead of freed.
///
/// A large body is delivered as `Data` that *borrows* its buffer (`Data(bytesNoCopy:…)`); when the
/// last copy of that `Data` goes away, its deallocator hands the buffer back here. Allocating and
/// freeing a 64 KiB block per response makes glibc trim the heap and fault the pages back in on the
/// next response (measured at 0.4× throughput); a pool avoids both the copy and the churn.
///
/// Buffers come in power-of-two classes from 4 KiB to 4 MiB; each class keeps at most
/// `4 MiB / size` idle buffers (64 at most), so the pool never holds more than ~12 MiB. Larger
/// buffers are plain allocations.
///
/// Buffers come from `malloc` and go back to `free`, so a request for memory the process cannot
/// have fails the one transfer that asked (``take(minimum:)`` returns `nil`) instead of ending the
/// process as a Swift allocation would.
final class BodyBufferPool: Sendable {
    static let shared = BodyBufferPool()

    static let smallestShift = 12
    static let largestShift = 22
    /// Idle buffers per class, as addresses (raw pointers are not `Sendable`; the pool owns them).
    private let idle = Lock<[[UInt]]>(
        Array(repeating: [], count: largestShift - smallestShift + 1)
    )

    private static func classIndex(forCapacity capacity: Int) -> Int? {
        guard capacity <= 1 << largestShift else { return nil }
        var shift = smallestShift
        while 1 << shift < capacity { shift += 1 }
        return shift - smallestShift
    }

    /// A buffer of at least `minimum` bytes, and its real capacity; `nil` when the memory
    /// cannot be had.
    func take(minimum: Int) -> (UnsafeMutableRawPointer, Int)? {
        guard let index = Self.classIndex(forCapacity: minimum) else {
            return malloc(minimum).map { ($0, minimum) }
        }
        let capacity = 1 << (index + Self.smallestShift)
        if let address = idle.withLock({ $0[index].popLast() }),
            let buffer = UnsafeMutableRawPointer(bitPattern: address)
        {
            return (buffer, capacity)
        }
        return malloc(capacity).map { ($0, capacity) }
    }

    /// Returns a buffer obtained from ``take(minimum:)`` with its capacity.
    func give(_ buffer: UnsafeMutableRawPointer, capacity: Int) {
        guard let index = Self.classIndex(forCapacity: capacity), 1 << (index + Self.smallestShift) == capacity else {
            free(buffer)
            return
        }
        let limit = min(64, max(1, (4 << 20) / capacity))
        let address = UInt(bitPattern: buffer)
        let kept = idle.withLock { idle -> Bool in
            guard idle[index].count < limit else { return false }
            idle[index].append(address)
            return true
        }
        if !kept { free(buffer) }
    }
}

/// The growing body of one response. It starts in the easy handle's scratch buffer (no
/// allocation, no pool lock: most bodies are small) unless its announced length is larger; a body
/// that outgrows the scratch buffer moves to a pooled one. Past ``segmentSize`` it grows in
/// segments instead of by copying into a larger buffer, so memory stays within the body's size
/// plus one segment however large it gets — a body near (or over) the response limit never
/// holds twice its size while it grows. Touched only by the driver's lease holder.
struct BodyAccumulator {
    private(set) var count = 0
    private var buffer: UnsafeMutableRawPointer?
    private var capacity = 0
    /// Whether `buffer` is the handle's scratch buffer (borrowed: never given to the pool).
    private var borrowed = false
    /// Full earlier pieces of a large body, in order (address, bytes used, capacity); `buffer`
    /// holds what follows them.
    private var segments: [(address: UnsafeMutableRawPointer, used: Int, capacity: Int)] = []
    /// The bytes in `segments`.
    private var segmentedCount = 0

    /// Bodies up to this size are copied into exact-size `Data`; larger ones are handed over.
    /// Also the size of an easy handle's scratch buffer.
    static let copyThreshold = 4096

    /// The most memory reserved up front for an announced length: a `Content-Length` is the
    /// server's claim, not bytes received, so a larger body grows as its bytes arrive.
    static let largestReservation = 1 << 20

    /// A buffer this large is not copied into a larger one: the body goes on in a new segment
    /// of this size.
    static let segmentSize = 8 << 20

    /// Prepares for a body: `expected` is its announced length, if any; `scratch` is the handle's
    /// buffer of ``copyThreshold`` bytes, used for a body that fits it. Returns `false` when the
    /// memory cannot be had.
    mutating func start(expected: Int?, scratch: UnsafeMutableRawPointer) -> Bool {
        guard buffer == nil else { return true }
        if let expected, expected > Self.copyThreshold {
            return reserve(min(expected, Self.largestReservation))
        }
        (buffer, capacity, borrowed) = (scratch, Self.copyThreshold, true)
        return true
    }

    /// Makes room for `minimum` bytes in the current buffer; `false` when the memory cannot be
    /// had (the body so far is kept).
    mutating func reserve(_ minimum: Int) -> Bool {
        guard minimum > capacity else { return true }
        guard let (fresh, freshCapacity) = BodyBufferPool.shared.take(minimum: minimum) else { return false }
        if let buffer {
            fresh.copyMemory(from: buffer, byteCount: count - segmentedCount)
            if !borrowed { BodyBufferPool.shared.give(buffer, capacity: capacity) }
        }
        buffer = fresh
        capacity = freshCapacity
        borrowed = false
        return true
    }

    /// Appends bytes; `false` when the memory for them cannot be had.
    mutating func append(_ bytes: UnsafeRawPointer, _ length: Int) -> Bool {
        var bytes = bytes
        var length = length
        while true {
            let used = count - segmentedCount
            if used + length <= capacity {
                (buffer.unsafelyUnwrapped + used).copyMemory(from: bytes, byteCount: length)
                count += length
                return true
            }
            if capacity < Self.segmentSize {
                // Double (at least to 16 KiB), up to a segment's size: copies stay small.
                guard reserve(min(max(used + length, capacity * 2, 16 * 1024), Self.segmentSize)) else { return false }
                continue
            }
            // Fill this segment, then go on in a new one.
            let room = capacity - used
            if room > 0 {
                (buffer.unsafelyUnwrapped + used).copyMemory(from: bytes, byteCount: room)
                count += room
                bytes += room
                length -= room
            }
            guard let (fresh, freshCapacity) = BodyBufferPool.shared.take(minimum: Self.segmentSize) else { return false }
            segments.append((buffer.unsafelyUnwrapped, capacity, capacity))
            segmentedCount += capacity
            buffer = fresh
            capacity = freshCapacity
        }
    }

    /// The bytes as `Data`, or `nil` when the memory to join a segmented body cannot be had; the
    /// accumulator is empty afterwards.
    mutating func takeData() -> Data? {
        defer { count = 0 }
        guard let buffer, count > 0 else { return Data() }
        if count <= Self.copyThreshold {
            return Data(bytes: buffer, count: count)
        }
        let capacity = self.capacity
        if segments.isEmpty {
            self.buffer = nil
            self.capacity = 0
            return Data(
                bytesNoCopy: buffer,
                count: count,
                deallocator: .custom { pointer, _ in
                    BodyBufferPool.shared.give(pointer, capacity: capacity)
                }
            )
        }
        // One buffer for the whole body, each segment freed as soon as it is copied: at most the
        // body plus one segment at any moment.
        guard let whole = malloc(count) else {
            release()
            return nil
        }
        var offset = 0
        for segment in segments {
            (whole + offset).copyMemory(from: segment.address, byteCount: segment.used)
            offset += segment.used
            BodyBufferPool.shared.give(segment.address, capacity: segment.capacity)
        }
        (whole + offset).copyMemory(from: buffer, byteCount: count - segmentedCount)
        BodyBufferPool.shared.give(buffer, capacity: capacity)
        let total = count
        segments = []
        segmentedCount = 0
        self.buffer = nil
        self.capacity = 0
        return Data(bytesNoCopy: whole, count: total, deallocator: .free)
    }

    /// Gives the buffers back (a borrowed one is just let go).
    mutating func release() {
        for segment in segments { BodyBufferPool.shared.give(segment.address, capacity: segment.capacity) }
        segments = []
        segmentedCount = 0
        if let buffer, !borrowed { BodyBufferPool.shared.give(buffer, capacity: capacity) }
        buffer = nil
        capacity = 0
        count = 0
        borrowed = false
    }
}
