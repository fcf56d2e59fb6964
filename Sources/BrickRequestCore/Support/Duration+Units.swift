/// Every conversion of a `Duration` into a number of units, in one place. Each saturates: a
/// negative duration is 0 and a huge one (`.seconds(Int64.max)`, "never") the largest value the
/// receiver takes, so no conversion can trap on overflow.
extension Duration {
    /// The most milliseconds handed to libcurl or `poll`: 2^40 ms, about 34 years, far from any
    /// overflow in libcurl's own arithmetic on timeouts.
    package static let maxMilliseconds = 1 << 40

    /// Whole milliseconds, rounded down: 0 for a negative duration, at most `limit`.
    package func milliseconds(atMost limit: Int = Duration.maxMilliseconds) -> Int {
        let (seconds, attoseconds) = components
        if seconds < 0 { return 0 }
        if seconds >= Int64(limit / 1000) { return limit }
        return min(Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000), limit)
    }

    /// Whole nanoseconds, 0 for a negative duration, at most `limit` seconds.
    package func nanoseconds(atMostSeconds limit: Int64) -> UInt64 {
        let (seconds, attoseconds) = components
        if seconds < 0 { return 0 }
        if seconds >= limit { return UInt64(limit) * 1_000_000_000 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }

    /// Whole nanoseconds, negative durations included, saturating at `Int64`'s bounds (points on
    /// the session clock, for the traffic state machines).
    package var signedNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return sum
    }

    /// Whole seconds, rounded down: 0 for a negative duration (an `Age` field's value).
    package var wholeSeconds: Int64 { max(0, components.seconds) }

    /// The duration in seconds, as a `Double`.
    package var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
