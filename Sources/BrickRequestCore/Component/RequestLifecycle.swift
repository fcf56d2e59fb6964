import FoundationEssentials
import Synchronization

/// Where a request is in its life.
public enum RequestState: Sendable, Hashable {
    /// Created, not resumed yet.
    case waiting
    /// An attempt is in flight.
    case running
    /// Waiting to retry; the associated value is the retry about to be made (1 for the first).
    case retrying(Int)
    /// Waiting for the network to come back; no attempt is spent while parked.
    case parked
    /// Finished with a response or an error.
    case completed
    /// Cancelled.
    case cancelled
}

/// The mutable life of one request — state, retry count, the transfer in flight — shared by the
/// ``Component`` and the ``Session`` that runs it. One lock guards it all.
@usableFromInline
package final class RequestLifecycle: Sendable {
    private struct Storage {
        var state: RequestState = .waiting
        var retryCount = 0
        /// When the first attempt began, on the session's clock, once a retry was made.
        var retriedSince: Duration?
        var task: TransportTask?
        /// The destination's reachability when the last attempt failed for want of a network.
        var reachabilityAtFailure: ReachabilityStatus?
        /// The date the server's `Retry-After` named, when the call ended without waiting for it.
        var declinedRetryDate: Date?
        /// The session's list of running requests, while this one is in it. Unretained: the
        /// session (which owns the list) is held by whoever runs the request until it completes.
        var registry: Unmanaged<RunningRequests>?
    }

    private let storage = Lock(Storage())
    /// Links of the session's list of running requests (``RunningRequests``); read and written
    /// only under that list's lock.
    nonisolated(unsafe) var newer: Unmanaged<RequestLifecycle>?
    nonisolated(unsafe) var older: Unmanaged<RequestLifecycle>?

    /// Creates a lifecycle in ``RequestState/waiting``.
    package init() {}

    deinit {
        // A request that began and was dropped without completing (never, in the library's own
        // paths) must not stay linked into its session's list.
        if let registry = storage.withLock({ $0.registry }) { registry._withUnsafeGuaranteedRef { $0.remove(self) } }
    }

    /// The current state.
    package var state: RequestState { storage.withLock { $0.state } }

    /// Retries made so far.
    package var retryCount: Int { storage.withLock { $0.retryCount } }

    /// Moves from waiting to running. Returns `false` (and changes nothing) if the request already
    /// ran or was cancelled: a request runs at most once.
    func begin(registeringIn registry: RunningRequests? = nil) -> Bool {
        let began = storage.withLock {
            guard $0.state == .waiting else { return false }
            $0.state = .running
            $0.registry = registry.map { Unmanaged.passUnretained($0) }
            return true
        }
        if began { registry?.insert(self) }
        return began
    }

    /// Records what is in flight — a transfer, or a retry wait — so ``cancel()`` can stop it; cancels
    /// it at once if the request was cancelled meanwhile.
    ///
    /// - Parameter attempt: For a transfer, the retry count of the attempt it carries (0: the
    ///   first). A transfer attached after a later retry began is not recorded: a transport may
    ///   complete before `start` returns, and the retry's wait, attached first, must stay the one a
    ///   cancel stops (it was overwritten by the finished first transfer, and a cancel during the
    ///   backoff waited for the backoff's end). `nil`: what runs now (a retry's wait, a park).
    func attach(_ task: TransportTask, attempt: Int? = nil) {
        let cancelNow = storage.withLock { storage -> Bool in
            if storage.state == .cancelled { return true }
            if let attempt, attempt < storage.retryCount { return false }
            storage.task = task
            return false
        }
        if cancelNow { task.cancel() }
    }

    /// Records that retry `count` is about to be made, for a request whose first attempt began at
    /// `startedAt` (session clock). Returns `false` if the request was cancelled.
    func retrying(_ count: Int, startedAt: Duration) -> Bool {
        storage.withLock {
            guard $0.state != .cancelled && $0.state != .completed else { return false }
            $0.state = .retrying(count)
            if $0.retriedSince == nil { $0.retriedSince = startedAt }
            $0.retryCount = count
            return true
        }
    }

    /// Records that the request waits for the network. Returns `false` if it was cancelled.
    func parked() -> Bool {
        storage.withLock {
            guard $0.state != .cancelled && $0.state != .completed else { return false }
            $0.state = .parked
            return true
        }
    }

    /// Records that an attempt is in flight again (after retrying or parking).
    func running() {
        storage.withLock {
            if $0.state != .cancelled && $0.state != .completed { $0.state = .running }
        }
    }

    /// Whether the request was cancelled.
    var isCancelled: Bool { storage.withLock { $0.state == .cancelled } }

    /// Records the destination's reachability as it was when an attempt failed for want of a
    /// network, for the retry engine, which runs later.
    func noteReachabilityAtFailure(_ status: ReachabilityStatus) {
        storage.withLock { $0.reachabilityAtFailure = status }
    }

    /// The status recorded by ``noteReachabilityAtFailure(_:)`` for the last attempt, if any;
    /// cleared, so that it is never read for a later attempt.
    func takeReachabilityAtFailure() -> ReachabilityStatus? {
        storage.withLock { storage in
            defer { storage.reachabilityAtFailure = nil }
            return storage.reachabilityAtFailure
        }
    }

    /// Records the date a server's `Retry-After` named when the retry engine delivered its
    /// response without waiting for it.
    func noteDeclinedRetry(until date: Date) {
        storage.withLock { $0.declinedRetryDate = date }
    }

    /// The date recorded by ``noteDeclinedRetry(until:)``, if any.
    var declinedRetryDate: Date? { storage.withLock { $0.declinedRetryDate } }

    /// Cancels the request. Returns the state it was in before (so a waiting request's handler can
    /// be told); does nothing once completed.
    @discardableResult
    package func cancel() -> RequestState {
        let (previous, task, registry) = storage.withLock {
            storage -> (RequestState, TransportTask?, Unmanaged<RunningRequests>?) in
            let previous = storage.state
            guard previous != .completed && previous != .cancelled else { return (previous, nil, nil) }
            storage.state = .cancelled
            defer {
                storage.task = nil
                storage.registry = nil
            }
            return (previous, storage.task, storage.registry)
        }
        registry?._withUnsafeGuaranteedRef { $0.remove(self) }
        task?.cancel()
        return previous
    }

    /// Marks the request finished. Returns `false` when it had been cancelled.
    func complete() -> Bool {
        completeCountingRetries().completed
    }

    /// ``complete()``, and the retries made, under one lock. The finished transfer is released
    /// after the lock.
    func completeCountingRetries() -> (completed: Bool, retries: Int, retriedSince: Duration?, declinedRetryDate: Date?) {
        // The task comes out of the lock so that releasing it (and the transfer) happens after it.
        let (_, completed, retries, since, declined, registry) = storage.withLock {
            storage -> (TransportTask?, Bool, Int, Duration?, Date?, Unmanaged<RunningRequests>?) in
            let finished = storage.task
            let registry = storage.registry
            storage.task = nil
            storage.registry = nil
            if storage.state == .cancelled {
                return (finished, false, storage.retryCount, storage.retriedSince, storage.declinedRetryDate, registry)
            }
            storage.state = .completed
            return (finished, true, storage.retryCount, storage.retriedSince, storage.declinedRetryDate, registry)
        }
        registry?._withUnsafeGuaranteedRef { $0.remove(self) }
        return (completed, retries, since, declined)
    }
}

/// The requests a session runs now: for ``Session/runningRequests`` and ``Session/cancelAll()``.
/// A request enters when it begins and leaves when it completes or is cancelled.
///
/// An intrusive doubly linked list through the lifecycles themselves (``RequestLifecycle/newer``,
/// ``RequestLifecycle/older``), under one lock: entering and leaving cost a few pointer writes,
/// no hashing, no allocation and no reference counting (measured: a dictionary here cost about
/// 1,000 instructions per request, 1.5 % of the whole). The list holds no reference: a
/// lifecycle leaves it before it can be freed, since whoever runs the request holds it until it
/// completes, and `deinit` takes it out in case it never did.
final class RunningRequests: Sendable {
    private struct List {
        var newest: Unmanaged<RequestLifecycle>?
        var count = 0
    }

    private let list = Lock(List())

    func insert(_ lifecycle: RequestLifecycle) {
        list.withLock { list in
            lifecycle.older = list.newest
            lifecycle.newer = nil
            list.newest?._withUnsafeGuaranteedRef { $0.newer = Unmanaged.passUnretained(lifecycle) }
            list.newest = Unmanaged.passUnretained(lifecycle)
            list.count += 1
        }
    }

    func remove(_ lifecycle: RequestLifecycle) {
        list.withLock { list in
            let me = Unmanaged.passUnretained(lifecycle)
            let (older, newer) = (lifecycle.older, lifecycle.newer)
            guard older != nil || newer != nil || list.newest?.toOpaque() == me.toOpaque() else { return }
            older?._withUnsafeGuaranteedRef { $0.newer = newer }
            if let newer {
                newer._withUnsafeGuaranteedRef { $0.older = older }
            } else {
                list.newest = older
            }
            lifecycle.older = nil
            lifecycle.newer = nil
            list.count -= 1
        }
    }

    var count: Int { list.withLock { $0.count } }

    /// The lifecycles in the list, retained (taken under the lock, while each is still alive).
    var all: [RequestLifecycle] {
        list.withLock { list in
            var result: [RequestLifecycle] = []
            result.reserveCapacity(list.count)
            var node = list.newest
            while let current = node {
                let lifecycle = current.takeUnretainedValue()
                result.append(lifecycle)
                node = lifecycle.older
            }
            return result
        }
    }
}
