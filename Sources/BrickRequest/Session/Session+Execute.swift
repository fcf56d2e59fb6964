import Foundation
import Logging

/// What a session needs to run one request: the rendered request (or why rendering failed), the
/// validation and the serializer. `Sendable`, built on the caller's side.
struct PreparedRequest<Value: Sendable>: Sendable {
    var rendered: Result<TransportRequest, BrickError>
    var validation: ResponseValidation?
    var serializer: any ResponseSerializer<Value>
    var retry: AutoRetryConfiguration

    init<R: ResponseType>(_ request: R) where R.SerializedObject == Value {
        let session = request.session
        do {
            rendered = .success(try RequestRenderer.render(request, session: session))
        } catch {
            rendered = .failure(error)
        }
        validation = request.responseValidation
        serializer = request.responseSerializer
        retry = request.autoRetryConfiguration
    }
}

extension Session {
    /// Runs a prepared request and calls `handler` once, through the callback queue.
    func execute<Value: Sendable>(
        _ prepared: PreparedRequest<Value>,
        lifecycle: RequestLifecycle,
        handler: @escaping @Sendable (Response<Value, BrickError>) -> Void
    ) {
        guard lifecycle.begin() else {
            logger.warning("resume() on a request that already ran or was cancelled; ignored")
            return
        }
        let request: TransportRequest
        switch prepared.rendered {
        case .failure(let error):
            _ = lifecycle.complete()
            report(renderError: error)
            callbacks.submit { handler(Response(request: nil, result: .failure(error), transportResponse: nil)) }
            return
        case .success(let rendered):
            request = rendered
        }
        willStart(request)
        let task = transport.start(request) { [self] result in
            callbacks.submit { [self] in
                handler(finish(prepared, request: request, result: result, lifecycle: lifecycle))
            }
        }
        lifecycle.attach(task)
    }

    /// Runs a prepared request on the caller's executor; cancelling the task cancels the transfer.
    nonisolated(nonsending) func perform<Value: Sendable>(
        _ prepared: PreparedRequest<Value>,
        lifecycle: RequestLifecycle
    ) async -> Response<Value, BrickError> {
        guard lifecycle.begin() else {
            let error = BrickError(.cancelled, message: "the request already ran or was cancelled")
            return Response(request: nil, result: .failure(error), transportResponse: nil)
        }
        let request: TransportRequest
        switch prepared.rendered {
        case .failure(let error):
            _ = lifecycle.complete()
            report(renderError: error)
            return Response(request: nil, result: .failure(error), transportResponse: nil)
        case .success(let rendered):
            request = rendered
        }
        willStart(request)
        let transport = self.transport
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation {
                (continuation: UnsafeContinuation<Result<TransportResponse, TransportError>, Never>) in
                let task = transport.start(request) { continuation.resume(returning: $0) }
                lifecycle.attach(task)
            }
        } onCancel: {
            lifecycle.cancel()
        }
        return finish(prepared, request: request, result: result, lifecycle: lifecycle)
    }

    /// Delivers a cancellation to a handler whose request was cancelled before it started.
    func deliverCancellation<Value: Sendable>(to handler: @escaping @Sendable (Response<Value, BrickError>) -> Void) {
        callbacks.submit { handler(Response(request: nil, result: .failure(.cancelled), transportResponse: nil)) }
    }

    private func willStart(_ request: TransportRequest) {
        logger.debug("request started", metadata: ["method": "\(request.head.method)", "url": "\(request.urlString)"])
        for monitor in eventMonitors { monitor.requestDidStart(request) }
    }

    private func report(renderError error: BrickError) {
        logger.warning("request could not be rendered", metadata: ["error": "\(error)"])
        for monitor in eventMonitors { monitor.requestDidFailToRender(error) }
    }

    /// Validation and serialization of one outcome; runs off the transport's thread (unless the
    /// callback queue is the transport thread).
    private func finish<Value: Sendable>(
        _ prepared: PreparedRequest<Value>,
        request: TransportRequest,
        result: Result<TransportResponse, TransportError>,
        lifecycle: RequestLifecycle
    ) -> Response<Value, BrickError> {
        let wasCancelled = !lifecycle.complete()
        for monitor in eventMonitors { monitor.request(request, didCompleteWith: result) }
        let retries = lifecycle.retryCount
        switch result {
        case .failure(let error):
            let brickError =
                wasCancelled || error.kind == .cancelled
                ? BrickError(.cancelled, message: "the request was cancelled", underlying: error)
                : BrickError.transport(error)
            if brickError.code != .cancelled {
                logger.warning(
                    "request failed",
                    metadata: ["method": "\(request.head.method)", "url": "\(request.urlString)", "error": "\(error)"]
                )
            }
            return Response(request: request, result: .failure(brickError), transportResponse: nil, retryCount: retries)
        case .success(let response):
            logger.debug(
                "request finished",
                metadata: [
                    "method": "\(request.head.method)", "url": "\(request.urlString)",
                    "status": "\(response.status.code)",
                ]
            )
            do throws(BrickError) {
                if let validation = prepared.validation { try validation.validate(response) }
                let value = try prepared.serializer.serialize(response)
                return Response(
                    request: request,
                    result: .success(value),
                    transportResponse: response,
                    retryCount: retries
                )
            } catch {
                return Response(
                    request: request,
                    result: .failure(error),
                    transportResponse: response,
                    retryCount: retries
                )
            }
        }
    }
}
