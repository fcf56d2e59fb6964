@_spi(TransportImplementation) import BrickRequestCore
import FoundationEssentials

/// A result made up by a transport that does not touch the network (a stub, a replay), delivered
/// to the request's destination as `CurlTransport` would: with a
/// ``TransportRequest/ResponseDestination/stream(_:)`` the body goes to the stream in one piece,
/// with a ``TransportRequest/ResponseDestination/file(path:)`` it is written to the file; either
/// way the response then has no body. A request with a progress handler gets one report first:
/// its whole body sent and the whole body received.
package enum ScriptedDelivery {
    package static func delivered(
        _ result: Result<TransportResponse, TransportError>,
        for request: TransportRequest
    ) -> Result<TransportResponse, TransportError> {
        guard case .success(let response) = result else { return result }
        let body = response.body ?? Data()
        if let progress = request.options.progress {
            let sent = (try? request.body?.contentLength()) ?? 0
            let received = Int64(body.count)
            progress(
                TransportRequest.Progress(
                    bytesReceived: received,
                    totalBytesExpectedToReceive: received,
                    bytesSent: sent,
                    totalBytesExpectedToSend: sent
                )
            )
        }
        var bodyFile: String? = nil
        switch request.options.destination {
        case .memory:
            return result
        case .stream(let stream):
            if !body.isEmpty,
                !stream.responseStarted(status: response.status, headerFields: response.headerFields)
                    || !body.withUnsafeBytes({ stream.receive($0) })
            {
                return .failure(TransportError(.cancelled, message: "the response body stream stopped the transfer"))
            }
        case .file(let path):
            do {
                try body.write(to: URL(fileURLWithPath: path), options: .atomic)
            } catch {
                return .failure(TransportError(.fileIO, message: "cannot write the response body file \(path): \(error)"))
            }
            bodyFile = path
        }
        return .success(
            TransportResponse(
                status: response.status,
                headerFields: response.headerFields,
                body: nil,
                bodyFile: bodyFile,
                metrics: response.metrics,
                url: response.url
            )
        )
    }
}
