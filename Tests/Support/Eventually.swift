import Testing

/// Waits until `condition` holds, looking every millisecond, for at most `limit` of real time
/// (30 s by default: room for a sanitizer's slowdown or a loaded machine); a condition that never
/// holds records an issue at the caller's line instead of hanging the test.
///
/// Time in which this task could not run does not count: when a look comes much later than asked
/// (every thread of the cooperative pool was busy, a sanitizer stopped the world), the deadline
/// moves by the delay, so a starved machine never fails a condition that the code under test had
/// no chance to meet — and a condition is always looked at again after such a delay.
///
/// This is for waiting on an event that other threads bring about. It never shows that something
/// did *not* happen: show that with a barrier (a later event, a follow-up request) or a
/// `ManualClock`.
package func eventually(
    within limit: Duration = .seconds(30),
    _ condition: () async -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    let interval = Duration.milliseconds(1)
    var deadline = ContinuousClock.now + limit
    while !(await condition()) {
        if ContinuousClock.now > deadline {
            Issue.record("condition still false after \(limit)", sourceLocation: sourceLocation)
            return
        }
        let asked = ContinuousClock.now
        try? await Task.sleep(for: interval)
        let late = ContinuousClock.now - asked - interval
        if late > .milliseconds(100) { deadline += late }
    }
}
