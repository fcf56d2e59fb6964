import BrickOfflineCore
import BrickOfflineSQLite
import PropertyBased
import Testing

/// Random histories against the group commit's state machine: arrivals while commits start and
/// end, in any order. Never two committers; every caller resumed exactly once — as the next
/// committer (in arrival order) or with its batch written; nobody left waiting once commits drain.
@Suite("Group commit: random histories", .timeLimit(.minutes(3)))
struct GroupCommitPropertyTests {
    enum Fate: Equatable { case waiting, committer, written }

    /// Runs a history (0: a caller arrives; 1: the committer takes the waiting batches; 2: the
    /// committer's transaction ends), then drains; returns the first broken promise, or `nil`.
    static func violation(_ history: [Int]) -> String? {
        var machine = GroupCommit.StateMachine<Int>()
        var fates: [Fate] = []
        var committer: Int?
        var taken = false
        var order: [Int] = []  // waiting callers, in arrival order
        func end() -> String? {
            switch machine.committed() {
            case .idle:
                if !order.isEmpty { return "idle with \(order) waiting" }
                fates[committer!] = .written
                committer = nil
            case .nextCommitter(let next):
                guard next == order.first else { return "next committer \(next), not the first waiting \(order)" }
                order.removeFirst()
                fates[committer!] = .written
                fates[next] = .committer
                committer = next
            }
            taken = false
            return nil
        }
        for (index, event) in history.enumerated() {
            switch event {
            case 0:
                let caller = fates.count
                fates.append(.waiting)
                switch machine.arrive(caller) {
                case .commitNow:
                    if committer != nil { return "event \(index): a second committer while \(committer!) commits" }
                    committer = caller
                    fates[caller] = .committer
                case .wait:
                    if committer == nil { return "event \(index): told to wait with no commit running" }
                    order.append(caller)
                }
            case 1 where committer != nil && !taken:
                let batch = machine.takeWaiting()
                if batch != order { return "event \(index): took \(batch), waiting were \(order)" }
                for caller in batch where fates[caller] != .waiting { return "caller \(caller) resumed twice" }
                for caller in batch { fates[caller] = .written }
                order = []
                taken = true
            case 2 where committer != nil:
                if let broken = end() { return "event \(index): \(broken)" }
            default:
                continue
            }
            if machine.waitingCount != order.count { return "event \(index): \(machine.waitingCount) waiting, the model has \(order.count)" }
        }
        while committer != nil {
            if !taken {
                for caller in machine.takeWaiting() { fates[caller] = .written }
                order = []
            }
            if let broken = end() { return "draining: \(broken)" }
        }
        if let left = fates.firstIndex(where: { $0 != .written }) { return "caller \(left) never resumed (\(fates[left]))" }
        return nil
    }

    @Test("never two committers; every caller resumed exactly once, next committers in arrival order")
    func histories() async {
        await propertyCheck(count: 300, input: Gen.int(in: 0...2).array(of: 1...400)) { history in
            let found = Self.violation(history)
            #expect(found == nil, "\(found ?? "")")
        }
    }

    @Test("regression rows")
    func rows() {
        for row in [[0], [0, 0, 0, 2, 2, 2], [0, 0, 1, 0, 2, 2], [0, 1, 0, 0, 2, 1, 2, 2], [2, 1, 0, 2]] {
            #expect(Self.violation(row) == nil, "\(row)")
        }
    }
}
