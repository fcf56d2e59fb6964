import BrickRequest
import HTTPTypes

/// One operation of a generated client, as a brick endpoint: the session runs it like any other
/// (retries, parking, traffic control, authenticator, instruments).
class OpenAPIOperation: Component, EmptyResponseType {
    let method: HTTPRequest.Method
    let urlString: String
    let headers: [String: String]
    let requestBody: RequestBody?
    let operationName: String?
    let session: Session
    let configuration: BrickRequestTransport.Configuration
    let responseDestination: TransportRequest.ResponseDestination

    init(
        method: HTTPRequest.Method,
        url: String,
        headers: [String: String],
        body: RequestBody?,
        operationID: String,
        session: Session,
        configuration: BrickRequestTransport.Configuration,
        destination: TransportRequest.ResponseDestination
    ) {
        self.method = method
        self.urlString = url
        self.headers = headers
        self.requestBody = body
        self.operationName = operationID
        self.session = session
        self.configuration = configuration
        self.responseDestination = destination
        super.init()
    }

    var autoRetryConfiguration: AutoRetryConfiguration { configuration.retry }
    var timeout: Duration? { configuration.timeout }
    var maxResponseSize: Int64? { configuration.maxResponseSize }
    var requestAuthenticator: Authenticator? { configuration.authenticator }
    var idempotencyKey: String? { nil }
}

/// A `GET` operation whose responses go through the session's response cache.
final class CachedOpenAPIOperation: OpenAPIOperation, CachedResponseType {
    let cachePolicy: CachePolicy

    init(
        method: HTTPRequest.Method,
        url: String,
        headers: [String: String],
        body: RequestBody?,
        operationID: String,
        session: Session,
        configuration: BrickRequestTransport.Configuration,
        destination: TransportRequest.ResponseDestination,
        cachePolicy: CachePolicy
    ) {
        self.cachePolicy = cachePolicy
        super.init(
            method: method,
            url: url,
            headers: headers,
            body: body,
            operationID: operationID,
            session: session,
            configuration: configuration,
            destination: destination
        )
    }
}
