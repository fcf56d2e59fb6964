import Testing

/// Looks for `value` every millisecond until it is there, for at most `limit` of real time; `nil`
/// when the limit passed first.
///
/// Time in which this task could not run does not count: when a look comes much later than asked
/// (every thread of the cooperative pool was busy, a sanitizer stopped the world), the deadline
/// moves by the delay, so a starved machine never gives up on something the code under test had
/// no chance to bring about — and `value` is always looked at again after such a delay.
package func poll<T>(within limit: Duration, _ value: () async -> T?) async -> T? {
    PoolWatchdog.start()
    let interval = Duration.milliseconds(1)
    var deadline = ContinuousClock.now + limit
    while true {
        if let found = await value() { return found }
        if ContinuousClock.now > deadline { return nil }
        let asked = ContinuousClock.now
        try? await Task.sleep(for: interval)
        // A healthy wake-up is late by well under a millisecond; on a starved machine every
        // late one counts (when only those over 100 ms did, a run whose first 20 s starve every
        // thread failed 30 s waits whose poller was never more than 100 ms late).
        let late = ContinuousClock.now - asked - interval
        if late > .milliseconds(10) { deadline += late }
    }
}

/// Waits until `condition` holds (``poll(within:_:)``: 60 s by default, room for a sanitizer's
/// slowdown or a loaded machine — it returns as soon as the condition holds, so the bound costs a
/// passing test nothing); a condition that never holds records an issue at the caller's line
/// instead of hanging the test.
///
/// This is for waiting on an event that other threads bring about. It never shows that something
/// did *not* happen: show that with a barrier (a later event, a follow-up request) or a
/// `ManualClock`.
package func eventually(
    within limit: Duration = .seconds(60),
    _ condition: () async -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    if await poll(within: limit, { await condition() ? () : nil }) == nil {
        Issue.record("condition still false after \(limit)", sourceLocation: sourceLocation)
    }
}
