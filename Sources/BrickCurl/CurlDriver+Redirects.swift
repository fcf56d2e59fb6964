internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The driver's redirect facet: applies ``RedirectDecision`` to a transfer.
extension CurlDriver {
    // MARK: - Redirects

    enum RedirectOutcome {
        case followed
        case failed(TransportError)
        case deliver
    }

    /// Follows a redirect as ``RedirectDecision`` says: parses the location, asks, and applies the
    /// answer to the transfer (new head, body kept or dropped, credentials kept or dropped).
    func redirect(_ transfer: Transfer, status: Int, to location: String) -> RedirectOutcome {
        let old = transfer.request
        let parts: URLValidator.Parts
        do {
            parts = try URLValidator.parse(location)
        } catch {
            return .failed(
                TransportError(
                    .redirectRefused,
                    message: "redirect to an unusable location: \(error.message)",
                    requestBytesSent: true
                )
            )
        }
        var head = old.head
        let decision = RedirectDecision.decide(
            status: status,
            method: head.method,
            from: RedirectDecision.Origin(scheme: head.scheme ?? "http", authority: head.authority ?? ""),
            to: RedirectDecision.Origin(scheme: parts.scheme, authority: parts.authority(in: location)),
            hopsSoFar: transfer.redirects.count,
            policy: configuration.redirects,
            credentialsStripped: transfer.redirects.strippedCredentials
        )
        let method: HTTPRequest.Method
        let dropsBody: Bool
        let stripsCredentials: Bool
        switch decision {
        case .refuse(let kind, let message):
            return .failed(TransportError(kind, message: message, requestBytesSent: true))
        case .follow(let next, let drops, let strips):
            (method, dropsBody, stripsCredentials) = (next, drops, strips)
        }
        head.scheme = parts.scheme
        head.authority = parts.authority(in: location)
        head.path = parts.pathAndQuery(in: location)
        head.method = method
        var body = old.body
        if dropsBody {
            body = nil
            head.headerFields[.contentType] = nil
            head.headerFields[.contentLength] = nil
            head.headerFields[.contentEncoding] = nil
        }
        if stripsCredentials {
            transfer.redirects.strippedCredentials = true
            head.headerFields[.authorization] = nil
            head.headerFields[.cookie] = nil
            head.headerFields[.proxyAuthorization] = nil
            for name in configuration.redirects.sensitiveFieldNames { head.headerFields[name] = nil }
        }
        transfer.request.head = head
        transfer.request.body = body
        transfer.redirects.count += 1
        guard let easy = transfer.easy else { return .deliver }
        curl_multi_remove_handle(multi, easy.raw)
        // A `.file` destination keeps its partial file: a followed redirect's body is never
        // written, so the next hop finds it as this one did.
        if let error = configure(easy, for: transfer) {
            // The first hop was sent: the server may have acted on it.
            return .failed(
                TransportError(
                    error.kind == .invalidRequest ? .redirectRefused : error.kind,
                    message: error.kind == .invalidRequest
                        ? "redirect to an unusable location: \(error.message)" : error.message,
                    curlCode: error.curlCode,
                    osErrno: error.osErrno,
                    requestBytesSent: true
                )
            )
        }
        curl_multi_add_handle(multi, easy.raw)
        return .followed
    }
}
