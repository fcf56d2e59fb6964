import BrickOfflineTestSupport
import BrickOffline
import Foundation
import Testing

/// What a delivery loop does after an empty lease, as a table, without I/O.
@Suite("IdleWake: after an empty lease, as a table", .timeLimit(.minutes(3)))
struct IdleWakeTests {
    static let now = Date(timeIntervalSince1970: 1_000_000)

    struct Row: Sendable, CustomStringConvertible {
        var name: String
        var due: Date?
        var emptyBefore: Bool
        var storeWakes: Bool
        var expected: IdleWake
        var description: String { name }
    }

    static let rows: [Row] = [
        Row(name: "nothing pending: sleep until woken", due: nil, emptyBefore: false, storeWakes: false, expected: .sleep(until: nil)),
        Row(name: "nothing pending, after an empty lease: still until woken", due: nil, emptyBefore: true, storeWakes: true, expected: .sleep(until: nil)),
        Row(name: "the next entry due later: sleep until then", due: now + 60, emptyBefore: false, storeWakes: false, expected: .sleep(until: now + 60)),
        Row(name: "due later, after an empty lease: until then", due: now + 60, emptyBefore: true, storeWakes: true, expected: .sleep(until: now + 60)),
        Row(name: "due now but not leased, first time: lease again (it was just added)", due: now, emptyBefore: false, storeWakes: true, expected: .leaseAgain),
        Row(name: "due in the past, first time: lease again", due: now - 5, emptyBefore: false, storeWakes: false, expected: .leaseAgain),
        Row(name: "due and not leased twice, a fleet's store: until a peer wakes it (no spin)", due: now - 5, emptyBefore: true, storeWakes: true, expected: .sleep(until: nil)),
        Row(name: "due and not leased twice, a store of one process: look again after the fallback", due: now, emptyBefore: true, storeWakes: false, expected: .sleep(until: now + IdleWake.fallback)),
    ]

    @Test("each row", arguments: rows)
    func row(_ row: Row) {
        #expect(IdleWake.decide(due: row.due, now: Self.now, emptyBefore: row.emptyBefore, storeWakes: row.storeWakes) == row.expected)
    }

    @Test("an empty lease with something due never sleeps until a date already past")
    func neverSleepsIntoThePast() {
        for offset in [-3600.0, -1, 0] {
            for emptyBefore in [false, true] {
                for storeWakes in [false, true] {
                    let decision = IdleWake.decide(due: Self.now + offset, now: Self.now, emptyBefore: emptyBefore, storeWakes: storeWakes)
                    if case .sleep(let until?) = decision { #expect(until > Self.now) }
                }
            }
        }
    }
}
