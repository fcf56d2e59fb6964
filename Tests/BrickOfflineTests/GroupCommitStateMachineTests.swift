import BrickOffline
import Testing

/// The group commit's decisions, without I/O: who commits, who waits, who commits next.
@Suite("Group commit: who commits, who waits, who commits next (table)", .timeLimit(.minutes(1)))
struct GroupCommitStateMachineTests {
    /// One step of a table row and what it must answer.
    enum Step {
        case arrive(Int, expect: GroupCommit.StateMachine<Int>.Arrival)
        case take(expect: [Int])
        case committed(expect: Int?)  // nil: idle; n: n commits next
    }

    static let rows: [(String, [Step])] = [
        ("alone: commits at once, then idle", [.arrive(1, expect: .commitNow), .take(expect: []), .committed(expect: nil)]),
        (
            "arrivals during a commit wait; all but the first of them join the next commit",
            [
                .arrive(1, expect: .commitNow), .take(expect: []),
                .arrive(2, expect: .wait), .arrive(3, expect: .wait), .arrive(4, expect: .wait),
                .committed(expect: 2),  // 2 commits next, its batch first…
                .take(expect: [3, 4]),  // …with 3 and 4 in the same transaction
                .committed(expect: nil),
            ]
        ),
        (
            "arrivals taken into the running commit are not handed the role",
            [
                .arrive(1, expect: .commitNow), .arrive(2, expect: .wait), .take(expect: [2]),
                .committed(expect: nil), .arrive(3, expect: .commitNow), .take(expect: []), .committed(expect: nil),
            ]
        ),
        (
            "first come, first committer: arrivals keep their order",
            [
                .arrive(1, expect: .commitNow), .take(expect: []), .arrive(5, expect: .wait), .arrive(6, expect: .wait),
                .committed(expect: 5), .arrive(7, expect: .wait), .take(expect: [6, 7]), .committed(expect: nil),
            ]
        ),
    ]

    @Test("every row", arguments: rows.indices)
    func row(_ index: Int) {
        let (name, steps) = Self.rows[index]
        var machine = GroupCommit.StateMachine<Int>()
        for (number, step) in steps.enumerated() {
            switch step {
            case .arrive(let waiter, let expected):
                let got = machine.arrive(waiter)
                #expect(got == expected, "\(name), step \(number)")
            case .take(let expected):
                #expect(machine.takeWaiting() == expected, "\(name), step \(number)")
            case .committed(let expected):
                switch machine.committed() {
                case .idle: #expect(expected == nil, "\(name), step \(number)")
                case .nextCommitter(let next): #expect(next == expected, "\(name), step \(number)")
                }
            }
        }
    }
}
