import BrickOfflineCore
import Foundation
import PropertyBased
import Testing

/// Random histories against the delivery loop's state machine: starts, turns and their leases
/// (six entries, any of them leased again while it runs), attempts ending, stops, grace periods
/// running out, closes. Never two attempts of one entry at once; never more attempts than the cap;
/// nothing launched once a stop began; a grace period's end cancels exactly what runs; a stop may
/// return exactly when nothing runs; a closed loop never starts again.
@Suite("Delivery loop: random histories", .timeLimit(.minutes(3)))
struct DeliveryLoopPropertyTests {
    typealias Machine = DeliveryLoop.StateMachine
    typealias Event = (kind: Int, detail: Int)
    static let ids = (0..<6).map { _ in UUID() }

    static func violation(_ events: [Event], cap: Int) -> String? {
        var machine = Machine()
        var running = Set<UUID>()
        var stopping = false
        var closed = false
        for (index, event) in events.enumerated() {
            let at = "event \(index) (\(event.kind))"
            switch event.kind {
            case 0:
                let start = machine.startRequested()
                if closed && start != .ignore { return "\(at): a closed loop answered \(start)" }
                if !closed && !stopping && start == .ignore { return "\(at): a stopped loop refused to start" }
            case 1:
                guard case .lease(let lease) = machine.turn(cap: cap) else { continue }
                if lease.limit != cap - running.count { return "\(at): lease of \(lease.limit) with \(running.count) of \(cap) running" }
                // The store returns up to `limit` entries; some may already run here (their lease lapsed).
                let picked = (0..<lease.limit).map { ids[(event.detail + $0 * 5) % ids.count] }
                let unique = Array(Set(picked))
                let result = machine.leased(unique.map { ($0, UUID()) }, cap: cap)
                for id in result.launch {
                    if running.contains(id) { return "\(at): a second attempt of \(id)" }
                    if stopping || closed { return "\(at): launched after a stop began" }
                    running.insert(id)
                }
                if running.count > cap { return "\(at): \(running.count) attempts, cap \(cap)" }
                if Set(result.launch).union(result.handBack) != Set(unique).subtracting(running.subtracting(result.launch)) {
                    return "\(at): leased \(unique), launched \(result.launch), handed back \(result.handBack)"
                }
            case 2:
                guard let id = running.sorted(by: { $0.uuidString < $1.uuidString }).dropFirst(event.detail % max(1, running.count)).first else { continue }
                running.remove(id)
                let drained = machine.attemptEnded(id)
                if drained != ((stopping || closed) && running.isEmpty) { return "\(at): drained \(drained) with \(running.count) running" }
            case 3:
                if closed { continue }
                stopping = true
                if machine.stopRequested() != running.isEmpty { return "\(at): a stop with \(running.count) running" }
            case 4:
                let cancelled = machine.graceExpired()
                if !cancelled.isEmpty && Set(cancelled) != running { return "\(at): the grace period's end cancels \(cancelled), running \(running)" }
                if !cancelled.allSatisfy(machine.isHandingBack) { return "\(at): a cancelled attempt is not handed back" }
            case 5 where stopping && running.isEmpty:
                machine.stopEnded()
                stopping = false
            case 6 where event.detail == 0:
                machine.closed()
                closed = true
            default:
                continue
            }
            if Set(machine.running.keys) != running { return "\(at): the machine runs \(machine.running.keys), the model \(running)" }
        }
        return nil
    }

    @Test("one attempt per entry, the cap, stops and closes hold in any history")
    func histories() async {
        let events = zip(Gen.int(in: 0...6), Gen.int(in: 0...9)).array(of: 1...300)
        await propertyCheck(count: 300, input: events, Gen.int(in: 1...4)) { raw, cap in
            let found = Self.violation(raw.map { Event(kind: $0.0, detail: $0.1) }, cap: cap)
            #expect(found == nil, "cap \(cap): \(found ?? "")")
        }
    }

    @Test("regression rows")
    func rows() {
        let rows: [[Event]] = [
            [(0, 0), (1, 0), (1, 0), (2, 0), (1, 1)],  // leased again while running: adopted, not launched twice
            [(0, 0), (1, 0), (3, 0), (1, 0), (4, 0), (2, 0), (2, 0), (5, 0), (0, 0), (1, 2)],  // stop, grace, restart
            [(0, 0), (1, 3), (6, 0), (0, 0), (1, 0), (2, 0)],  // closed: never again
        ]
        for row in rows { #expect(Self.violation(row, cap: 2) == nil, "\(row)") }
    }
}
