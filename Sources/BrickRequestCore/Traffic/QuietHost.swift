import Synchronization

/// The host a session sent to first, whose first attempts ``TrafficControl`` admits without its
/// lock while the host is quiet (``HostTraffic/isQuiet(at:)``: no rate, no pause, no cap, the
/// breaker closed): such an admission would only count the attempt, and its success would only be
/// counted too. The counts wait here, in two words, until the next time the lock is taken, when
/// they are handed to the host's ``HostTraffic`` (``HostTraffic/absorb(firstAttempts:successes:)``)
/// before anything reads it.
///
/// Only this one host is found without the lock: most sessions talk to one host, and its record
/// (not its ``TrafficControl/HostSlot``, which idle hosts lose) lives as long as the session.
final class QuietHost: Sendable {
    /// The host's key, `host[:port]` lowercased.
    let key: String
    /// The authority as the first request's URL spelled it, and its scheme: how a request is
    /// matched without making its key.
    let spelledAuthority: [UInt8]
    let isHTTPS: Bool?
    /// Whether the host is quiet, as its state said when the lock was last released after
    /// touching it. Set under the lock (releasing), read without it (acquiring).
    let isQuiet = Atomic<Bool>(false)
    /// First attempts admitted without the lock, not yet absorbed.
    let firstAttempts: PendingCount
    /// Successes of those attempts, not yet absorbed.
    let successes: PendingCount
    /// Whether successes are counted at all (the policy has a breaker).
    let countsSuccesses: Bool

    init(key: String, spelled: (bytes: [UInt8], isHTTPS: Bool?), traffic: HostTraffic) {
        self.key = key
        spelledAuthority = spelled.bytes
        isHTTPS = spelled.isHTTPS
        firstAttempts = PendingCount(window: traffic.firstAttemptWindow)
        successes = PendingCount(window: traffic.successWindow ?? .seconds(1))
        countsSuccesses = traffic.successWindow != nil
    }

    /// Counts a first attempt of `request` admitted at `now`, if the request is for this host, the
    /// host is quiet and the count fits its word. `false`: admit it under the lock.
    func admitsQuietly(_ request: TransportRequest, at now: Duration) -> Bool {
        isQuiet.load(ordering: .acquiring) && request.hasSpelledAuthority(spelledAuthority, isHTTPS: isHTTPS)
            && firstAttempts.add(at: now)
    }

    /// Counts the success of an attempt admitted quietly at `admittedAt`, if the host is still
    /// quiet. `false`: record the outcome under the lock.
    func countsQuietly(successAdmittedAt admittedAt: Duration) -> Bool {
        guard isQuiet.load(ordering: .acquiring) else { return false }
        return !countsSuccesses || successes.add(at: admittedAt)
    }

    /// Takes both counts out (under the lock), leaving empty words at `now`'s buckets.
    func take(at now: Duration) -> (firstAttempts: (count: Int, at: Duration), successes: (count: Int, at: Duration)) {
        (firstAttempts.take(at: now), successes.take(at: now))
    }
}

/// A count of events in one bucket of a ``SlidingWindow``'s width, in one atomic word: the
/// bucket's number (40 bits) above a 24-bit count. Adding needs the word's bucket to be the
/// event's; anything else (a new bucket, a full count) goes through the lock, whose ``take(at:)``
/// empties the word and moves it to the current bucket.
///
/// Adding compares the time with the bucket's bounds, which needs no division (turning a
/// `Duration` into a bucket number takes two 128-bit divisions, more than the rest of admission).
struct PendingCount: ~Copyable, Sendable {
    static let countBits: UInt64 = 24
    static let countMask: UInt64 = (1 << countBits) - 1
    /// The largest bucket number a word holds; times past it (or before 0) are counted under
    /// the lock.
    static let lastEpoch: Int64 = (1 << 40) - 1

    private let word = Atomic<UInt64>(0)
    /// The width of a bucket, in nanoseconds, and in attoseconds (`Duration`'s unit).
    let width: Int64
    private let span: Int128

    /// A count for a window of `window`'s buckets.
    init(window: Duration) {
        width = SlidingWindow.bucketWidth(length: window)
        span = Int128(width) * 1_000_000_000
    }

    /// Adds one event at `now`. `false` when the word holds another bucket or is full.
    func add(at now: Duration) -> Bool {
        var current = word.load(ordering: .relaxed)
        // In attoseconds, as plain integers: `Duration`'s own `+` and `<` are calls (~90
        // instructions on this path), `Int128`'s are inlined.
        let time = now.attoseconds
        let start = Int128(current >> Self.countBits) * span
        guard time >= start, time < start + span else { return false }
        while current & Self.countMask < Self.countMask {
            let (exchanged, original) = word.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            // Another thread added, or took the count (and perhaps moved the bucket).
            if original >> Self.countBits != current >> Self.countBits { return false }
            current = original
        }
        return false
    }

    /// Empties the word: the events it held and the start of their bucket. The word moves to
    /// `now`'s bucket, or stays at its own when that is later (`now` read before another thread's).
    func take(at now: Duration) -> (count: Int, at: Duration) {
        let nowEpoch = min(max(0, SlidingWindow.epoch(of: now, width: width)), Self.lastEpoch)
        var current = word.load(ordering: .relaxed)
        while true {
            let epoch = Int64(current >> Self.countBits)
            let next = UInt64(max(epoch, nowEpoch)) << Self.countBits
            let (exchanged, original) = word.compareExchange(expected: current, desired: next, ordering: .relaxed)
            if exchanged {
                return (Int(current & Self.countMask), .nanoseconds(epoch * width))
            }
            current = original
        }
    }
}
