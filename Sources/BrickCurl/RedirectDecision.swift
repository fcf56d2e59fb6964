import HTTPTypes
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Whether and how a redirect is followed, with no I/O (async-http-client's `RedirectState`
/// manner): the driver parses the `Location`, asks here, and applies the answer to the transfer.
/// `RedirectDecisionTests` checks it row by row (status × method × origin change × policy).
///
/// - The hop limit: more than ``CurlTransport/RedirectPolicy/maxRedirects`` fails with
///   ``TransportError/Kind/tooManyRedirects``.
/// - `https` → `http` is refused (``TransportError/Kind/redirectRefused``) unless the policy allows it.
/// - The method: `303` turns every method but `HEAD` into `GET`; `301` and `302` turn `POST` into
///   `GET` (what browsers and curl do); `307` and `308` keep method and body. A method turned into
///   `GET` loses its body and the fields that describe it.
/// - Credentials (`Authorization`, `Cookie`, `Proxy-Authorization`) are dropped when the redirect
///   leaves the origin (scheme, host or port change), and stay dropped for the rest of the chain.
package enum RedirectDecision: Sendable, Hashable {
    /// Follow: send `method` to the new location; `dropsBody` when the method became `GET`;
    /// `stripsCredentials` when the credential fields must go.
    case follow(method: HTTPRequest.Method, dropsBody: Bool, stripsCredentials: Bool)
    /// Refuse: fail the request with this kind and message.
    case refuse(TransportError.Kind, String)

    /// An origin: scheme and authority (`host[:port]`).
    package struct Origin: Sendable, Hashable {
        package var scheme: String
        package var authority: String

        package init(scheme: String, authority: String) {
            self.scheme = scheme.lowercased()
            self.authority = authority
        }

        /// The authority lowercased, with the scheme's default port made explicit.
        var normalizedAuthority: String {
            let lower = authority.lowercased()
            if lower.hasSuffix("]") || !lower.contains(":") {
                return lower + (scheme == "https" ? ":443" : ":80")
            }
            return lower
        }

        /// Whether `other` is another origin.
        func differs(from other: Origin) -> Bool {
            scheme != other.scheme || normalizedAuthority != other.normalizedAuthority
        }
    }

    /// The decision for one redirect.
    ///
    /// - Parameters:
    ///   - status: The redirect's status (301, 302, 303, 307, 308).
    ///   - method: The method of the request that got it.
    ///   - from: The origin of that request.
    ///   - to: The origin of the `Location`.
    ///   - hopsSoFar: Redirects already followed for this request.
    ///   - policy: The session's redirect policy.
    ///   - credentialsStripped: Whether an earlier hop already dropped the credentials.
    package static func decide(
        status: Int,
        method: HTTPRequest.Method,
        from: Origin,
        to: Origin,
        hopsSoFar: Int,
        policy: CurlTransport.RedirectPolicy,
        credentialsStripped: Bool
    ) -> RedirectDecision {
        if hopsSoFar >= policy.maxRedirects {
            return .refuse(.tooManyRedirects, "more than \(policy.maxRedirects) redirects")
        }
        if from.scheme == "https" && to.scheme == "http" && !policy.allowsHTTPSToHTTP {
            return .refuse(.redirectRefused, "redirect from https to http refused")
        }
        let becomesGET = status == 303 ? method != .head : ((status == 301 || status == 302) && method == .post)
        return .follow(
            method: becomesGET ? .get : method,
            dropsBody: becomesGET,
            stripsCredentials: credentialsStripped || from.differs(from: to)
        )
    }
}
