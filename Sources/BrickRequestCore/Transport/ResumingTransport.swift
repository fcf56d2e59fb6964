/// A transport that resumes the tasks awaiting its completions at its own safe point, where they
/// then go on until they next suspend (the curl transport's driver).
package protocol ResumingTransport: Transport {
    /// Resumes `continuation` with `result`: at the transport's next safe point when called inside
    /// a completion, at once elsewhere.
    func resume(
        _ continuation: UnsafeContinuation<Result<TransportResponse, TransportError>, Never>,
        with result: Result<TransportResponse, TransportError>
    )
}

extension UnsafeContinuation where T == Result<TransportResponse, TransportError>, E == Never {
    /// Resumes the task awaiting a transport's completion through `transport` when it can run
    /// resumed tasks itself (`Transport.send` and ``Session``'s `send`), at once otherwise.
    package func resume(returning result: T, through transport: (any ResumingTransport)?) {
        if let transport {
            transport.resume(self, with: result)
        } else {
            resume(returning: result)
        }
    }
}
