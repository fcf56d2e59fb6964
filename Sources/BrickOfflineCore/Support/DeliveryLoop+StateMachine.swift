import Foundation

extension DeliveryLoop {
    /// The decisions of a delivery loop, without I/O: which entries it leases, launches and hands
    /// back, when it sleeps, how it stops. ``DeliveryLoop`` feeds it events (a turn of the loop, a
    /// lease's result, an attempt's end, a stop and its grace period) and performs the actions it
    /// returns; `DeliveryLoopStateMachineTests` checks it as a table.
    ///
    /// ## Stopping (the one semantic of the queue and the manager)
    /// A stop takes nothing new at once (a lease under way hands its entries straight back). The
    /// attempts under way have the grace period to end; their outcomes are recorded. Those still
    /// running then are cancelled and handed back — lease released, no attempt counted, due at once
    /// for another worker — and their outcomes are not recorded. The stop returns once no attempt
    /// runs. A stopped loop starts again when asked; a closed one never does.
    package struct StateMachine: Sendable {
        package enum Phase: Equatable, Sendable {
            /// Not started, or stopped: ``startRequested()`` starts it.
            case idle
            /// Leasing and launching.
            case running
            /// A stop is under way: nothing new is taken; the attempts under way end.
            case stopping(graceOver: Bool)
            /// For ever.
            case closed
        }

        /// An attempt this process runs.
        package struct Attempt: Equatable, Sendable {
            /// The lease it holds now: a newer one is adopted if its entry is leased again here.
            package var lease: UUID
            /// Set when a stop's grace period ended with it running: handed back, not recorded.
            package var handingBack = false
        }

        /// What to do when asked to start.
        package enum Start: Equatable, Sendable {
            /// Start the loop's task (and its wake-up sources).
            case startLoop
            /// It runs already: wake it.
            case wake
            /// Stopping or closed: nothing.
            case ignore
        }

        /// A lease to take.
        package struct Lease: Equatable, Sendable {
            /// The most entries to take.
            package var limit: Int
            /// Only the queue's head, if it is due (the manager at cap 1: requests are sent in the
            /// order they were queued, one at a time).
            package var headOfLine = false
            /// Make every paused entry due first (reachability changed, or asked to).
            package var clearingPauses = false

            package init(limit: Int, headOfLine: Bool = false, clearingPauses: Bool = false) {
                self.limit = limit
                self.headOfLine = headOfLine
                self.clearingPauses = clearingPauses
            }
        }

        /// What the loop does next, at the top of a turn.
        package enum Turn: Equatable, Sendable {
            /// Take this lease.
            case lease(Lease)
            /// Every place is taken: sleep until an attempt ends (or another wake-up).
            case sleepUntilWoken
            /// Stopped: the loop's task ends.
            case exit
        }

        /// What to do with the entries a lease returned.
        package struct Leased: Equatable, Sendable {
            /// Start an attempt of each.
            package var launch: [OfflineEntry.ID] = []
            /// Give back unattempted (stopped meanwhile, or over a cap lowered meanwhile).
            package var handBack: [OfflineEntry.ID] = []

            package init(launch: [OfflineEntry.ID] = [], handBack: [OfflineEntry.ID] = []) {
                self.launch = launch
                self.handBack = handBack
            }
        }

        package private(set) var phase: Phase = .idle
        package private(set) var running: [OfflineEntry.ID: Attempt] = [:]
        /// Whether the last lease came back empty while an entry was due.
        private var emptyWithDue = false
        /// Whether paused entries are made due before the next lease.
        private var pausesToClear = false
        /// While the loop sleeps with nothing due before this date (`.distantFuture`: nothing
        /// scheduled), the date; `nil` while it works.
        package private(set) var plannedWake: Date?
        /// Whether the last lease came back full (the store had more due than there was room
        /// for): a backlog, drained in batches (see ``turn(cap:)``).
        private var backlog = false
        /// The limit of the last lease asked for.
        private var lastLimit = 0
        /// At a cap of 1, lease the head of the queue only (the manager), not any due entry.
        private let headOfLineAtCapOne: Bool

        /// - Parameter headOfLineAtCapOne: At a cap of 1, lease only the head of the queue.
        package init(headOfLineAtCapOne: Bool = false) {
            self.headOfLineAtCapOne = headOfLineAtCapOne
        }

        /// The lease an attempt holds now, while it runs.
        package func lease(of id: OfflineEntry.ID) -> UUID? { running[id]?.lease }

        /// Whether an attempt is to be handed back when it ends, not recorded.
        package func isHandingBack(_ id: OfflineEntry.ID) -> Bool { running[id]?.handingBack ?? false }

        /// Asked to take entries (an add, `startProcessing`, a registration); with
        /// `clearingPauses`, every paused entry is made due before the next lease.
        package mutating func startRequested(clearingPauses: Bool = false) -> Start {
            switch phase {
            case .idle:
                phase = .running
                emptyWithDue = false
                pausesToClear = pausesToClear || clearingPauses
                return .startLoop
            case .running:
                pausesToClear = pausesToClear || clearingPauses
                return .wake
            case .stopping, .closed:
                return .ignore
            }
        }

        /// An entry was added, due at `notBefore`: whether the loop must be started or woken. Not
        /// while it sleeps until an earlier date anyway (it reads the store again then).
        package func needsWake(forEntryDue notBefore: Date) -> Bool {
            guard phase == .running, let plannedWake else { return true }
            return notBefore < plannedWake
        }

        /// The network changed: paused entries deserve a look at once. Returns whether to wake the
        /// loop (it runs).
        package mutating func reachabilityChanged() -> Bool {
            guard phase == .running else { return false }
            pausesToClear = true
            return true
        }

        /// The top of a turn of the loop, with the cap as it is now.
        ///
        /// Through a backlog (the last lease came back full) with attempts still running, the loop
        /// leases once a quarter of the cap is free, not each time one attempt ends: one claim
        /// (and one read of the pause) then serves many entries instead of one, and the attempts
        /// under way keep the rest of the cap busy meanwhile. Without a backlog, or with nothing
        /// running, it leases at once (an entry added to a quiet queue is never held back).
        package mutating func turn(cap: Int) -> Turn {
            guard phase == .running else { return .exit }
            let cap = max(1, cap)
            let free = cap - running.count
            guard free > 0 else { return .sleepUntilWoken }
            if backlog && !running.isEmpty && free < Self.leaseBatch(cap: cap) { return .sleepUntilWoken }
            defer { pausesToClear = false }
            lastLimit = free
            return .lease(Lease(limit: free, headOfLine: headOfLineAtCapOne && cap == 1, clearingPauses: pausesToClear))
        }

        /// The free room a lease waits for through a backlog: a quarter of the cap (at least 1).
        package static func leaseBatch(cap: Int) -> Int { max(1, cap / 4) }

        /// The loop goes to sleep until `date` (`nil`: until woken).
        package mutating func sleeping(until date: Date?) {
            plannedWake = date ?? .distantFuture
        }

        /// The loop woke.
        package mutating func woke() {
            plannedWake = nil
        }

        /// A lease returned entries (`id`, `lease`). Those already running here adopt the new lease;
        /// the rest are launched while there is room under `cap`, the others handed back. After a
        /// stop began, every entry is handed back.
        package mutating func leased(_ entries: [(id: OfflineEntry.ID, lease: UUID)], cap: Int) -> Leased {
            var result = Leased()
            backlog = lastLimit > 0 && entries.count >= lastLimit
            for (id, lease) in entries {
                if running[id] != nil {
                    // Its lease lapsed and was renewed here: never a second attempt.
                    running[id]?.lease = lease
                } else if phase == .running && running.count < max(1, cap) {
                    running[id] = Attempt(lease: lease)
                    result.launch.append(id)
                } else {
                    result.handBack.append(id)
                }
            }
            if !entries.isEmpty { emptyWithDue = false }
            return result
        }

        /// A lease returned nothing; `due` is when the store's next entry is due (`nil`: none).
        package mutating func leasedNothing(due: Date?, now: Date, storeWakes: Bool) -> IdleWake {
            backlog = false
            guard phase == .running else { return .sleep(until: nil) }
            let decision = IdleWake.decide(due: due, now: now, emptyBefore: emptyWithDue, storeWakes: storeWakes)
            switch decision {
            case .leaseAgain: emptyWithDue = true
            case .sleep(let until): emptyWithDue = due != nil && until != due
            }
            return decision
        }

        /// An attempt's task ended (recorded, or handed back). Returns whether a stop waiting for
        /// the attempts under way may return now.
        package mutating func attemptEnded(_ id: OfflineEntry.ID) -> Bool {
            running[id] = nil
            return isDrained
        }

        /// A stop begins. Returns whether it may return at once (nothing runs).
        package mutating func stopRequested() -> Bool {
            if phase != .closed { phase = .stopping(graceOver: false) }
            return isDrained
        }

        /// The stop's grace period ended: the attempts still running, to cancel (each marked to be
        /// handed back when it ends).
        package mutating func graceExpired() -> [OfflineEntry.ID] {
            guard case .stopping(graceOver: false) = phase else { return [] }
            phase = .stopping(graceOver: true)
            for id in running.keys { running[id]?.handingBack = true }
            return Array(running.keys)
        }

        /// The stop returned: the loop is idle, and starts again when asked (unless closed).
        package mutating func stopEnded() {
            if case .stopping = phase { phase = .idle }
        }

        /// Closed for ever: nothing starts again. The attempts under way still end here.
        package mutating func closed() {
            phase = .closed
        }

        /// Every attempt is forgotten (the manager's `clearAllRequests`): returns them, to cancel;
        /// their outcomes are ignored by their owner and their ends change nothing here.
        package mutating func abandonAll() -> [OfflineEntry.ID] {
            defer { running = [:] }
            return Array(running.keys)
        }

        private var isDrained: Bool {
            switch phase {
            case .stopping, .closed: return running.isEmpty
            case .idle, .running: return false
            }
        }
    }
}
