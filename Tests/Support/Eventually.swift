import Testing

/// Waits until `condition` holds, looking every millisecond, for at most `limit` of real time
/// (30 s by default: room for a sanitizer's slowdown or a loaded machine); a condition that never
/// holds records an issue at the caller's line instead of hanging the test.
///
/// This is for waiting on an event that other threads bring about. It never shows that something
/// did *not* happen: show that with a barrier (a later event, a follow-up request) or a
/// `ManualClock`.
package func eventually(
    within limit: Duration = .seconds(30),
    _ condition: () async -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    let deadline = ContinuousClock.now + limit
    while !(await condition()) {
        if ContinuousClock.now > deadline {
            Issue.record("condition still false after \(limit)", sourceLocation: sourceLocation)
            return
        }
        try? await Task.sleep(for: .milliseconds(1))
    }
}
