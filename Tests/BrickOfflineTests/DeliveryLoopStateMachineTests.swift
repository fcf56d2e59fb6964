import BrickOfflineTestSupport
import BrickOffline
import Foundation
import Testing

/// The delivery loop's decisions (leases, launches, hand-backs, sleeps, the stop) as tables of
/// events and answers: no store, no tasks, no clock.
@Suite("DeliveryLoop.StateMachine: the queue's and the manager's loop, as tables", .timeLimit(.minutes(3)))
struct DeliveryLoopStateMachineTests {
    typealias Machine = DeliveryLoop.StateMachine
    static let now = Date(timeIntervalSince1970: 1_000_000)
    /// Entries 0…9, with a lease each; `renewed` is a second lease of the same entry.
    static let ids = (0..<10).map { UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", $0))! }
    static let leases = (0..<10).map { UUID(uuidString: String(format: "10000000-0000-0000-0000-%012d", $0))! }
    static let renewed = UUID(uuidString: "20000000-0000-0000-0000-000000000000")!

    static func lease(_ limit: Int, headOfLine: Bool = false, clearingPauses: Bool = false) -> Machine.Turn {
        .lease(Machine.Lease(limit: limit, headOfLine: headOfLine, clearingPauses: clearingPauses))
    }

    /// One event and what the machine answers (or, for a check, what it holds).
    enum Step: Sendable {
        case start(Machine.Start)
        case startClearingPauses(Machine.Start)
        case reachabilityChanged(wake: Bool)
        /// The loop sleeps until `now + seconds` (`nil`: until woken), then wakes.
        case sleeping(TimeInterval?)
        case woke
        /// An entry added, due at `now + seconds` → whether the loop must be woken.
        case added(due: TimeInterval, wake: Bool)
        case turn(cap: Int, Machine.Turn)
        /// Entries leased (by index, with their first lease) → launched, handed back (indices).
        case leased([Int], cap: Int, launch: [Int], handBack: [Int])
        /// Entry 0 leased again (a renewed lease) while it runs: adopted, nothing launched.
        case leasedAgainWhileRunning
        case nothing(due: TimeInterval?, storeWakes: Bool, IdleWake)
        /// An attempt ended → whether a waiting stop may return.
        case ended(Int, drained: Bool)
        case stop(drained: Bool)
        /// The grace period ended → the attempts to cancel (indices).
        case graceOver([Int])
        case stopEnded
        case close
        case abandon([Int])
        case phase(Machine.Phase)
        case running([Int])
        case handingBack(Int, Bool)
    }

    struct Table: Sendable, CustomStringConvertible {
        var name: String
        /// The manager's loop: head of line at cap 1.
        var headOfLineAtCapOne = false
        var steps: [Step]
        var description: String { name }
    }

    static let tables: [Table] = [
        Table(name: "start, lease up to the cap, launch; full: sleep until an attempt ends", steps: [
            .phase(.idle), .start(.startLoop), .start(.wake), .phase(.running),
            .turn(cap: 3, lease(3)),
            .leased([0, 1], cap: 3, launch: [0, 1], handBack: []), .running([0, 1]),
            .turn(cap: 3, lease(1)),
            .leased([2], cap: 3, launch: [2], handBack: []),
            .turn(cap: 3, .sleepUntilWoken),
            .ended(1, drained: false), .running([0, 2]), .turn(cap: 3, lease(1)),
        ]),
        Table(name: "through a backlog (a full lease), the next lease waits for a quarter of the cap; a lease that comes back short ends the backlog: leases at once again", steps: [
            .start(.startLoop), .turn(cap: 8, lease(8)),
            .leased([0, 1, 2, 3, 4, 5, 6, 7], cap: 8, launch: [0, 1, 2, 3, 4, 5, 6, 7], handBack: []),
            .turn(cap: 8, .sleepUntilWoken),
            .ended(0, drained: false), .turn(cap: 8, .sleepUntilWoken),
            .ended(1, drained: false), .turn(cap: 8, lease(2)),
            // Only one came back: the backlog is drained.
            .leased([8], cap: 8, launch: [8], handBack: []),
            .ended(2, drained: false), .turn(cap: 8, lease(2)),
        ]),
        Table(name: "through a backlog with nothing left running: leases at once", steps: [
            .start(.startLoop), .turn(cap: 8, lease(8)),
            .leased([0, 1, 2, 3, 4, 5, 6, 7], cap: 8, launch: [0, 1, 2, 3, 4, 5, 6, 7], handBack: []),
            .ended(0, drained: false), .ended(1, drained: false), .ended(2, drained: false), .ended(3, drained: false),
            .ended(4, drained: false), .ended(5, drained: false), .ended(6, drained: false),
            .turn(cap: 8, lease(7)),
        ]),
        Table(name: "an empty lease ends a backlog", steps: [
            .start(.startLoop), .turn(cap: 8, lease(8)),
            .leased([0, 1, 2, 3, 4, 5, 6, 7], cap: 8, launch: [0, 1, 2, 3, 4, 5, 6, 7], handBack: []),
            .ended(0, drained: false), .ended(1, drained: false), .turn(cap: 8, lease(2)),
            .nothing(due: nil, storeWakes: true, .sleep(until: nil)),
            .ended(2, drained: false), .turn(cap: 8, lease(3)),
        ]),
        Table(name: "a lease lost (it lapsed while the attempt ran) and the entry leased again here: the attempt adopts the new lease, never a second attempt", steps: [
            .start(.startLoop), .leased([0], cap: 2, launch: [0], handBack: []),
            .leasedAgainWhileRunning, .running([0]),
        ]),
        Table(name: "a cap lowered while a lease was under way: the surplus goes back unattempted", steps: [
            .start(.startLoop), .turn(cap: 4, lease(4)),
            .leased([0, 1, 2, 3], cap: 1, launch: [0], handBack: [1, 2, 3]), .running([0]),
            .turn(cap: 1, .sleepUntilWoken),
        ]),
        Table(name: "a cap below one counts as one", steps: [
            .start(.startLoop), .turn(cap: 0, lease(1)),
        ]),
        Table(name: "an empty lease: sleep until the next due date, or until woken; due but not leased twice sleeps (no spin)", steps: [
            .start(.startLoop),
            .nothing(due: nil, storeWakes: false, .sleep(until: nil)),
            .nothing(due: 60, storeWakes: false, .sleep(until: now + 60)),
            .nothing(due: 0, storeWakes: true, .leaseAgain),
            .nothing(due: 0, storeWakes: true, .sleep(until: nil)),
            // Something leased in between: the next empty lease leases again first.
            .leased([0], cap: 2, launch: [0], handBack: []),
            .nothing(due: -1, storeWakes: false, .leaseAgain),
            .nothing(due: -1, storeWakes: false, .sleep(until: now + IdleWake.fallback)),
        ]),
        Table(name: "stop with nothing running: returns at once; the loop exits; start again later", steps: [
            .start(.startLoop), .stop(drained: true), .phase(.stopping(graceOver: false)),
            .turn(cap: 2, .exit), .start(.ignore), .stopEnded, .phase(.idle),
            .start(.startLoop), .turn(cap: 2, lease(2)),
        ]),
        Table(name: "stop: nothing new is taken (a lease under way hands back), the attempts under way end within the grace period", steps: [
            .start(.startLoop), .leased([0, 1], cap: 4, launch: [0, 1], handBack: []),
            .stop(drained: false), .turn(cap: 4, .exit),
            .leased([2, 3], cap: 4, launch: [], handBack: [2, 3]),
            .ended(0, drained: false), .ended(1, drained: true),
            .graceOver([]), .stopEnded, .phase(.idle),
        ]),
        Table(name: "stop: the grace period ends with attempts running: cancelled, handed back, then the stop returns", steps: [
            .start(.startLoop), .leased([0, 1], cap: 4, launch: [0, 1], handBack: []),
            .stop(drained: false), .ended(0, drained: false),
            .graceOver([1]), .handingBack(1, true), .phase(.stopping(graceOver: true)),
            .graceOver([]),  // once
            .ended(1, drained: true), .handingBack(1, false), .stopEnded,
        ]),
        Table(name: "closed: never starts again; attempts under way still end; a stop then returns when they have", steps: [
            .start(.startLoop), .leased([0], cap: 2, launch: [0], handBack: []),
            .close, .phase(.closed), .turn(cap: 2, .exit), .start(.ignore),
            .stop(drained: false), .phase(.closed), .ended(0, drained: true),
            .stopEnded, .phase(.closed), .start(.ignore),
        ]),
        Table(name: "abandoned attempts are forgotten (the manager's clearAllRequests): their places are free at once", steps: [
            .start(.startLoop), .leased([0, 1], cap: 2, launch: [0, 1], handBack: []),
            .turn(cap: 2, .sleepUntilWoken), .abandon([0, 1]), .running([]),
            .turn(cap: 2, lease(2)),
        ]),
        Table(name: "an add due before the planned wake wakes the loop; one due at or after it does not", steps: [
            .added(due: 0, wake: true),  // not started: start it
            .start(.startLoop), .added(due: 0, wake: true),  // working: wake (kept for its sleep)
            .sleeping(60), .added(due: 30, wake: true), .added(due: 60, wake: false), .added(due: 3600, wake: false),
            .woke, .added(due: 3600, wake: true),
            // Asleep with nothing scheduled: woken, to plan a wake-up at the new entry's date.
            .sleeping(nil), .added(due: 3600, wake: true),
        ]),
        Table(name: "reachability lost and regained: the paused entries are made due before the next lease, once", steps: [
            .reachabilityChanged(wake: false),  // not running: nothing
            .start(.startLoop), .turn(cap: 2, lease(2)),
            .reachabilityChanged(wake: true), .reachabilityChanged(wake: true),
            .turn(cap: 2, lease(2, clearingPauses: true)), .turn(cap: 2, lease(2)),
            // retryPausedEntriesNow(), a type registered: the same.
            .startClearingPauses(.wake), .turn(cap: 2, lease(2, clearingPauses: true)),
            // Full: kept for the turn that leases.
            .leased([0, 1], cap: 2, launch: [0, 1], handBack: []),
            .reachabilityChanged(wake: true), .turn(cap: 2, .sleepUntilWoken),
            .ended(0, drained: false), .turn(cap: 2, lease(1, clearingPauses: true)),
        ]),
        Table(name: "cap 1, the manager: the head of line only; a batch above 1; the queue never head of line", headOfLineAtCapOne: true, steps: [
            .start(.startLoop), .turn(cap: 1, lease(1, headOfLine: true)),
            .leased([0], cap: 1, launch: [0], handBack: []), .turn(cap: 1, .sleepUntilWoken),
            .ended(0, drained: false), .turn(cap: 3, lease(3)), .turn(cap: 1, lease(1, headOfLine: true)),
        ]),
        Table(name: "cap 1, the queue: a lease of one, any due entry", steps: [
            .start(.startLoop), .turn(cap: 1, lease(1)),
        ]),
        Table(name: "asked to start while stopping: ignored (a graceful shutdown takes nothing new)", steps: [
            .start(.startLoop), .leased([0], cap: 2, launch: [0], handBack: []), .stop(drained: false),
            .start(.ignore), .turn(cap: 2, .exit), .ended(0, drained: true), .stopEnded, .start(.startLoop),
        ]),
    ]

    @Test("each table", arguments: tables)
    func table(_ table: Table) {
        var machine = Machine(headOfLineAtCapOne: table.headOfLineAtCapOne)
        for (index, step) in table.steps.enumerated() {
            let at = "step \(index): \(step)"
            switch step {
            case .start(let expected):
                #expect(machine.startRequested() == expected, "\(at)")
            case .startClearingPauses(let expected):
                #expect(machine.startRequested(clearingPauses: true) == expected, "\(at)")
            case .reachabilityChanged(let wake):
                #expect(machine.reachabilityChanged() == wake, "\(at)")
            case .sleeping(let seconds):
                machine.sleeping(until: seconds.map { Self.now + $0 })
            case .woke:
                machine.woke()
            case .added(let due, let wake):
                #expect(machine.needsWake(forEntryDue: Self.now + due) == wake, "\(at)")
            case .turn(let cap, let expected):
                #expect(machine.turn(cap: cap) == expected, "\(at)")
            case .leased(let indices, let cap, let launch, let handBack):
                let leased = machine.leased(indices.map { (id: Self.ids[$0], lease: Self.leases[$0]) }, cap: cap)
                #expect(leased.launch == launch.map { Self.ids[$0] }, "\(at)")
                #expect(leased.handBack == handBack.map { Self.ids[$0] }, "\(at)")
            case .leasedAgainWhileRunning:
                let leased = machine.leased([(id: Self.ids[0], lease: Self.renewed)], cap: 2)
                #expect(leased == Machine.Leased(), "\(at)")
                #expect(machine.lease(of: Self.ids[0]) == Self.renewed, "\(at)")
            case .nothing(let due, let storeWakes, let expected):
                let decision = machine.leasedNothing(due: due.map { Self.now + $0 }, now: Self.now, storeWakes: storeWakes)
                #expect(decision == expected, "\(at)")
            case .ended(let index, let drained):
                #expect(machine.attemptEnded(Self.ids[index]) == drained, "\(at)")
            case .stop(let drained):
                #expect(machine.stopRequested() == drained, "\(at)")
            case .graceOver(let indices):
                #expect(Set(machine.graceExpired()) == Set(indices.map { Self.ids[$0] }), "\(at)")
            case .stopEnded:
                machine.stopEnded()
            case .close:
                machine.closed()
            case .abandon(let indices):
                #expect(Set(machine.abandonAll()) == Set(indices.map { Self.ids[$0] }), "\(at)")
            case .phase(let expected):
                #expect(machine.phase == expected, "\(at)")
            case .running(let indices):
                #expect(Set(machine.running.keys) == Set(indices.map { Self.ids[$0] }), "\(at)")
            case .handingBack(let index, let expected):
                #expect(machine.isHandingBack(Self.ids[index]) == expected, "\(at)")
            }
        }
    }
}
