/// Running a request: `response(_:)` + `resume()`, or the async `response()` and `value`.
extension ResponseType where Self: Component {
    /// Registers the handler that receives the outcome, once, on the session's callback queue.
    /// Call ``RequestType/resume()`` to start.
    ///
    /// - Parameter handler: Receives the response; also called with ``BrickError/cancelled`` when
    ///   the request is cancelled.
    /// - Returns: The request, for chaining `.resume()`.
    @discardableResult
    @inlinable
    public func response(_ handler: @escaping @Sendable (Response<SerializedObject, BrickError>) -> Void) -> Self {
        let serializer = responseSerializer
        pendingDelivery = { handler($0.response(serializer)) }
        return self
    }

    /// Renders the request on the caller's side, sends it and waits for the outcome. Cancelling the
    /// calling task cancels the transfer. Never throws: failures are in ``Response/result``.
    ///
    /// - Returns: The response.
    @inlinable
    nonisolated(nonsending) public func response() async -> Response<SerializedObject, BrickError> {
        let prepared = PreparedRequest(self)
        let serializer = responseSerializer
        return await prepared.session.perform(prepared, lifecycle: lifecycle).response(serializer)
    }

    /// Every delivery of the request, in order: one, or two for a ``CachedResponseType`` endpoint
    /// whose policy is ``CachePolicy/cacheThenNetwork`` and whose cache holds a response (the
    /// stored response, then the server's).
    ///
    /// ```swift
    /// for await timeline in GetTimeline().responses() {
    ///     show(timeline.value, stale: timeline.isStale)
    /// }
    /// ```
    ///
    /// The request starts when the sequence is made. Stopping the iteration early (or cancelling
    /// the iterating task) cancels it.
    ///
    /// - Returns: The responses; the sequence ends after the last.
    public func responses() -> AsyncStream<Response<SerializedObject, BrickError>> {
        let prepared = PreparedRequest(self)
        let serializer = responseSerializer
        let (session, lifecycle) = (prepared.session, lifecycle)
        let (stream, continuation) = AsyncStream.makeStream(of: Response<SerializedObject, BrickError>.self)
        let task = Task {
            let last = await session.perform(prepared, lifecycle: lifecycle) { early in
                continuation.yield(early.response(serializer))
            }
            continuation.yield(last.response(serializer))
            continuation.finish()
        }
        continuation.onTermination = { termination in
            if case .cancelled = termination { task.cancel() }
        }
        return stream
    }

    /// The serialized value of a successful request.
    ///
    /// ```swift
    /// let user = try await GetUser(userID: "100").value
    /// ```
    ///
    /// - Throws: ``BrickError``; ``BrickError/cancelled`` when the calling task is cancelled.
    @inlinable
    nonisolated(nonsending) public var value: SerializedObject {
        get async throws(BrickError) {
            try await response().result.get()
        }
    }
}

extension RequestType where Self: Component {
    /// Starts the request: renders it on the caller's side and hands it to its ``RequestType/session``
    /// (or that session's replacement in this task: ``Session/withReplacement(_:keepingEndpointCaches:isolation:operation:)``).
    /// The handler given to `response(_:)` receives the outcome; without one — or for an endpoint
    /// with no response brick — the request is sent all the same and its outcome dropped.
    /// A request runs once: later calls are ignored.
    @inlinable
    public func resume() {
        let prepared = PreparedRequest(self)
        let session = prepared.session
        // Consumed, not copied: a copy of the prepared request retains each of its references.
        if let deliver = pendingDelivery {
            pendingDelivery = nil
            session.execute(consume prepared, lifecycle: lifecycle, handler: deliver)
        } else {
            session.execute(consume prepared, lifecycle: lifecycle) { _ in }
        }
    }

    /// Registers a handler for the request's progress: bytes sent and received so far, and the
    /// totals when known (0 otherwise). It runs on the session's callback queue, each time the
    /// figures change, in order, and all of them before the response handler runs (or, with the
    /// async `response()` and `value`, before they return). Received bytes are counted on the
    /// wire (before decompression); a retry starts them over. Register it before the request
    /// starts; it is let go once the request has started. A report describes the moment its
    /// figures were taken, not the moment it runs: on a busy queue the transfer may have ended
    /// by then (a download's file already in place).
    ///
    /// ```swift
    /// DownloadBackup().progress { progress in
    ///     print("\(progress.bytesReceived) of \(progress.totalBytesExpectedToReceive)")
    /// }.response { response in … }.resume()
    /// ```
    ///
    /// - Parameter handler: Receives each new figure.
    /// - Returns: The request, for chaining.
    @discardableResult
    public func progress(_ handler: @escaping @Sendable (TransportRequest.Progress) -> Void) -> Self {
        progressHandler = handler
        return self
    }

    /// Cancels the request. A handler registered with `response(_:)` receives
    /// ``BrickError/cancelled`` exactly once (also when the request had not been resumed yet).
    public func cancel() {
        let previous = lifecycle.cancel()
        if previous == .waiting, let deliver = pendingDelivery {
            pendingDelivery = nil
            session.resolved.deliverCancellation(to: deliver)
        }
    }
}
