import Synchronization

/// Instruments a session's requests attempt by attempt — metrics, tracing — and may add header
/// fields to each attempt (a trace's context).
///
/// Give instruments to a session; `BrickMetrics` and `BrickTracing` provide the standard ones:
///
/// ```swift
/// let session = Session(instruments: [MetricsInstrument(), TracingInstrument()])
/// ```
///
/// A session without instruments, or whose instruments all decline a request (no metrics backend
/// or tracer bootstrapped), runs it exactly as before: nothing is allocated or called per attempt.
public protocol RequestInstrument: Sendable {
    /// A request begins. Called in the caller's context — the task that awaits `value` or
    /// `response()`, or the one that calls `resume()` — so its task-local values (a trace's
    /// `ServiceContext`) are readable here.
    ///
    /// - Parameters:
    ///   - request: The rendered request (its URL may hold secrets in the query: redact before
    ///     recording it).
    ///   - operation: The endpoint's ``RequestType/operationName``, or `nil`.
    /// - Returns: The observer of this request's attempts, or `nil` to leave it alone.
    func observe(_ request: TransportRequest, operation: String?) -> (any RequestObserver)?
}

/// Observes one request, made by a ``RequestInstrument``: its attempts, parking and the cache's
/// answers. The attempts of one request never overlap: each ``attemptWillStart(_:resendCount:)``
/// is followed by its ``attemptDidEnd(_:request:resendCount:)`` before the next begins, possibly
/// on another thread.
public protocol RequestObserver: AnyObject, Sendable {
    /// An attempt is about to go to the transport: the host's traffic policy admitted it.
    ///
    /// - Parameters:
    ///   - request: The attempt's request; header fields added here are sent (`traceparent`).
    ///   - resendCount: 0 for the first attempt, then 1, 2, …: retries, the replay after a `401`,
    ///     the attempt after parking.
    func attemptWillStart(_ request: inout TransportRequest, resendCount: Int)
    /// The attempt ended: the transport's result, before validation (a `503` is a success here).
    ///
    /// - Parameters:
    ///   - result: What the transport delivered.
    ///   - request: The attempt's request, as sent.
    ///   - resendCount: As given to ``attemptWillStart(_:resendCount:)``.
    func attemptDidEnd(
        _ result: Result<TransportResponse, TransportError>,
        request: TransportRequest,
        resendCount: Int
    )
    /// The request was parked until its destination is reachable again (no attempt spent).
    func requestDidPark()
    /// The request's response cache answered (``CachedResponseType`` endpoints).
    ///
    /// - Parameter answer: What the cache did.
    func cacheDidAnswer(_ answer: CacheAnswer)
    /// Runs `log` — the session's entry for the request's outcome, `request finished` or
    /// `request failed` — in the context of the request's last attempt. `TracingInstrument` makes
    /// that attempt's span context current, so a logger whose `metadataProvider` reads the trace
    /// (swift-otel's) adds `trace_id` and `span_id`: the entry joins the span. Default: runs `log`.
    ///
    /// - Parameter log: The logging call; run it exactly once, at once.
    func withLogContext(_ log: () -> Void)
}

extension RequestObserver {
    /// Does nothing.
    public func requestDidPark() {}
    /// Does nothing.
    public func cacheDidAnswer(_ answer: CacheAnswer) {}
    /// Runs `log` as it is.
    ///
    /// - Parameter log: The logging call.
    public func withLogContext(_ log: () -> Void) { log() }
}

/// What a response cache did for one request.
public enum CacheAnswer: String, Sendable, Hashable, CaseIterable {
    /// A stored response was delivered without asking the server (fresh, or stale where the policy
    /// allows it).
    case hit
    /// Nothing usable was stored: the server's response was delivered.
    case miss
    /// A stored response was revalidated: the server answered `304 Not Modified`.
    case revalidated
    /// The server could not be reached or failed: a stored response was delivered in its place.
    case fallback
}

/// A request's observers together, and its count of attempts.
final class Observation: Sendable {
    private let observers: [any RequestObserver]
    /// Attempts that went to the transport so far.
    private let attempts: Atomic<Int>

    init(_ observers: [any RequestObserver], attemptsBefore: Int) {
        self.observers = observers
        self.attempts = Atomic(attemptsBefore)
    }

    /// Tells the observers an attempt starts; returns its resend count.
    func attemptWillStart(_ request: inout TransportRequest) -> Int {
        let resendCount = attempts.wrappingAdd(1, ordering: .relaxed).oldValue
        for observer in observers { observer.attemptWillStart(&request, resendCount: resendCount) }
        return resendCount
    }

    func attemptDidEnd(_ result: Result<TransportResponse, TransportError>, request: TransportRequest, resendCount: Int) {
        for observer in observers { observer.attemptDidEnd(result, request: request, resendCount: resendCount) }
    }

    func requestDidPark() {
        for observer in observers { observer.requestDidPark() }
    }

    func cacheDidAnswer(_ answer: CacheAnswer) {
        for observer in observers { observer.cacheDidAnswer(answer) }
    }

    /// Runs `log` inside every observer's log context, the first observer's outermost.
    func withLogContext(_ log: () -> Void) {
        func run(from index: Int) {
            guard index < observers.count else { return log() }
            observers[index].withLogContext { run(from: index + 1) }
        }
        run(from: 0)
    }
}

extension Session {
    /// The observers of a request that begins now, or `nil` when no instrument wants it.
    /// `attemptsBefore`: attempts made earlier (by an offline queue, in earlier runs).
    func observation(of request: TransportRequest, operation: String?, attemptsBefore: Int = 0) -> Observation? {
        guard !instruments.isEmpty else { return nil }
        var observers: [any RequestObserver] = []
        // Through the buffer: each instrument is borrowed in place (an array's subscript, even by
        // index, copied each existential out and destroyed it: ~200 instructions per request).
        instruments.withUnsafeBufferPointer { instruments in
            for index in instruments.indices {
                if let observer = instruments[index].observe(request, operation: operation) { observers.append(observer) }
            }
        }
        return observers.isEmpty ? nil : Observation(observers, attemptsBefore: attemptsBefore)
    }
}
