/// Counts events over a sliding window of time, in ten buckets: what the circuit breaker and the
/// retry budget count with. Pure; times are the session clock's elapsed time.
///
/// The window slides a bucket at a time (a tenth of its length), so an event counts for between
/// 0.9 and 1 window. Memory is fixed: ten epochs and ten counts.
package struct SlidingWindow: Sendable, Hashable {
    /// The number of buckets.
    package static let buckets = 10
    private let bucketWidth: Int64
    private var epochs = [Int64](repeating: .min, count: SlidingWindow.buckets)
    private var counts = [Int](repeating: 0, count: SlidingWindow.buckets)

    /// A window of `length`.
    ///
    /// - Parameter length: How far back events count.
    package init(length: Duration) {
        bucketWidth = max(1, length.signedNanoseconds / Int64(Self.buckets))
    }

    /// The window's length.
    package var length: Duration { .nanoseconds(bucketWidth * Int64(Self.buckets)) }

    /// Adds `count` events at `now`.
    ///
    /// - Parameters:
    ///   - count: How many events.
    ///   - now: When they happened.
    package mutating func add(_ count: Int = 1, at now: Duration) {
        let epoch = epoch(of: now)
        let slot = Int(UInt64(bitPattern: epoch) % UInt64(Self.buckets))
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
        let current = epoch(of: now)
        var total = 0
        for slot in 0..<Self.buckets where epochs[slot] > current - Int64(Self.buckets) && epochs[slot] <= current {
            total += counts[slot]
        }
        return total
    }

    /// The events counted in the last `span` before `now` (rounded up to whole buckets).
    ///
    /// - Parameters:
    ///   - span: How far back.
    ///   - now: The end.
    /// - Returns: The count.
    package func total(over span: Duration, at now: Duration) -> Int {
        let current = epoch(of: now)
        let width = max(1, min(Int64(Self.buckets), (span.signedNanoseconds + bucketWidth - 1) / bucketWidth))
        var total = 0
        for slot in 0..<Self.buckets where epochs[slot] > current - width && epochs[slot] <= current {
            total += counts[slot]
        }
        return total
    }

    /// Forgets every event.
    package mutating func reset() {
        for slot in 0..<Self.buckets {
            epochs[slot] = .min
            counts[slot] = 0
        }
    }

    private func epoch(of time: Duration) -> Int64 {
        time.signedNanoseconds / bucketWidth
    }
}
