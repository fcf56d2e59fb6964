import FoundationEssentials
import Synchronization

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

    /// A buffer of at least `minimum` bytes, and its real capacity.
    func take(minimum: Int) -> (UnsafeMutableRawPointer, Int) {
        guard let index = Self.classIndex(forCapacity: minimum) else {
            return (UnsafeMutableRawPointer.allocate(byteCount: minimum, alignment: 16), minimum)
        }
        let capacity = 1 << (index + Self.smallestShift)
        if let address = idle.withLock({ $0[index].popLast() }),
            let buffer = UnsafeMutableRawPointer(bitPattern: address)
        {
            return (buffer, capacity)
        }
        return (UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16), capacity)
    }

    /// Returns a buffer obtained from ``take(minimum:)`` with its capacity.
    func give(_ buffer: UnsafeMutableRawPointer, capacity: Int) {
        guard let index = Self.classIndex(forCapacity: capacity), 1 << (index + Self.smallestShift) == capacity else {
            buffer.deallocate()
            return
        }
        let limit = min(64, max(1, (4 << 20) / capacity))
        let address = UInt(bitPattern: buffer)
        let kept = idle.withLock { idle -> Bool in
            guard idle[index].count < limit else { return false }
            idle[index].append(address)
            return true
        }
        if !kept { buffer.deallocate() }
    }
}

/// The growing body of one response. It starts in the easy handle's scratch buffer (no
/// allocation, no pool lock: most bodies are small) unless its announced length is larger; a body
/// that outgrows the scratch buffer moves to a pooled one. Touched only by the driver's lease
/// holder.
struct BodyAccumulator {
    private(set) var count = 0
    private var buffer: UnsafeMutableRawPointer?
    private var capacity = 0
    /// Whether `buffer` is the handle's scratch buffer (borrowed: never given to the pool).
    private var borrowed = false

    /// Bodies up to this size are copied into exact-size `Data`; larger ones are handed over.
    /// Also the size of an easy handle's scratch buffer.
    static let copyThreshold = 4096

    /// Prepares for a body: `expected` is its announced length, if any; `scratch` is the handle's
    /// buffer of ``copyThreshold`` bytes, used for a body that fits it.
    mutating func start(expected: Int?, scratch: UnsafeMutableRawPointer) {
        guard buffer == nil else { return }
        if let expected, expected > Self.copyThreshold {
            reserve(expected)
        } else {
            (buffer, capacity, borrowed) = (scratch, Self.copyThreshold, true)
        }
    }

    mutating func reserve(_ minimum: Int) {
        guard minimum > capacity else { return }
        let (fresh, freshCapacity) = BodyBufferPool.shared.take(minimum: minimum)
        if let buffer {
            fresh.copyMemory(from: buffer, byteCount: count)
            if !borrowed { BodyBufferPool.shared.give(buffer, capacity: capacity) }
        }
        buffer = fresh
        capacity = freshCapacity
        borrowed = false
    }

    mutating func append(_ bytes: UnsafeRawPointer, _ length: Int) {
        if count + length > capacity {
            reserve(max(count + length, capacity * 2, 16 * 1024))
        }
        (buffer! + count).copyMemory(from: bytes, byteCount: length)
        count += length
    }

    /// The bytes as `Data`; the accumulator is empty afterwards.
    mutating func takeData() -> Data {
        defer { count = 0 }
        guard let buffer, count > 0 else { return Data() }
        if count <= Self.copyThreshold {
            return Data(bytes: buffer, count: count)
        }
        let capacity = self.capacity
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

    /// Gives a pooled buffer back (a borrowed one is just let go).
    mutating func release() {
        if let buffer, !borrowed { BodyBufferPool.shared.give(buffer, capacity: capacity) }
        buffer = nil
        capacity = 0
        count = 0
        borrowed = false
    }
}
