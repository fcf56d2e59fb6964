/// Counts events over a sliding window of time, in ten buckets: what the circuit breaker and the
/// retry budget count with. Pure; times are the session clock's elapsed time.
///
/// The window slides a bucket at a time (a tenth of its length), so an event counts for between
/// 0.9 and 1 window. Memory is fixed: ten epochs and ten counts.
package struct SlidingWindow: Sendable, Hashable {
    /// The number of buckets.
    package static let buckets = 10
    private let bucketWidth: Int64
    private let width: Duration
    private var epochs = [Int64](repeating: .min, count: SlidingWindow.buckets)
    private var counts = [Int](repeating: 0, count: SlidingWindow.buckets)
    /// The bucket of the last `add`, and its span: a time inside it needs no division (turning a
    /// `Duration` into a bucket number costs a 128-bit division, most of an `add`).
    private var current = Bucket(epoch: .min, start: .zero, end: .zero)

    private struct Bucket: Sendable, Hashable {
        var epoch: Int64
        var start: Duration
        var end: Duration
    }

    /// A window of `length`.
    ///
    /// - Parameter length: How far back events count.
    package init(length: Duration) {
        bucketWidth = Self.bucketWidth(length: length)
        width = .nanoseconds(bucketWidth)
    }

    /// The width of a bucket of a window of `length`, in nanoseconds (at least 1).
    ///
    /// - Parameter length: The window's length.
    /// - Returns: A tenth of it.
    package static func bucketWidth(length: Duration) -> Int64 {
        max(1, length.signedNanoseconds / Int64(buckets))
    }

    /// The bucket `time` falls in, for buckets `width` nanoseconds wide (rounded down, negative
    /// times included).
    ///
    /// - Parameters:
    ///   - time: The time.
    ///   - width: The bucket width, from ``bucketWidth(length:)``.
    /// - Returns: The bucket's number.
    package static func epoch(of time: Duration, width: Int64) -> Int64 {
        let nanoseconds = time.signedNanoseconds
        return nanoseconds >= 0 ? nanoseconds / width : (nanoseconds - width + 1) / width
    }

    /// The window's length.
    package var length: Duration { .nanoseconds(bucketWidth * Int64(Self.buckets)) }

    /// Adds `count` events at `now`.
    ///
    /// - Parameters:
    ///   - count: How many events.
    ///   - now: When they happened.
    package mutating func add(_ count: Int = 1, at now: Duration) {
        let epoch: Int64
        if now >= current.start && now < current.end {
            epoch = current.epoch
        } else {
            epoch = self.epoch(of: now)
            let start = Duration.nanoseconds(epoch * bucketWidth)
            current = Bucket(epoch: epoch, start: start, end: start + width)
        }
        let slot = Int(UInt64(bitPattern: epoch) % UInt64(Self.buckets))
        // A slot holding a later bucket: the events are a whole window older than it, so they no
        // longer count (resetting it would lose the later bucket's).
        if epochs[slot] > epoch { return }
        if epochs[slot] != epoch {
            epochs[slot] = epoch
            counts[slot] = 0
        }
        counts[slot] += count
    }

    /// The events counted in the window ending at `now`.
    ///
    /// - Parameter now: The end of the window.
    /// - Returns: The count.
    package func total(at now: Duration) -> Int {
        total(buckets: Int64(Self.buckets), at: now)
    }

    /// The events counted in the last `span` before `now` (rounded up to whole buckets).
    ///
    /// - Parameters:
    ///   - span: How far back.
    ///   - now: The end.
    /// - Returns: The count.
    package func total(over span: Duration, at now: Duration) -> Int {
        total(buckets: max(1, min(Int64(Self.buckets), (span.signedNanoseconds + bucketWidth - 1) / bucketWidth)), at: now)
    }

    /// Forgets every event.
    package mutating func reset() {
        for slot in 0..<Self.buckets {
            epochs[slot] = .min
            counts[slot] = 0
        }
    }

    private func total(buckets: Int64, at now: Duration) -> Int {
        let last = now >= current.start && now < current.end ? current.epoch : epoch(of: now)
        var total = 0
        for slot in 0..<Self.buckets where epochs[slot] > last - buckets && epochs[slot] <= last {
            total += counts[slot]
        }
        return total
    }

    private func epoch(of time: Duration) -> Int64 {
        Self.epoch(of: time, width: bucketWidth)
    }
}
