import BrickRequestCore
public import FoundationEssentials
import HTTPTypes

/// An HTTP Archive (HAR 1.2): exchanges read from a file — one BrickHAR wrote, or a browser's
/// developer tools, Charles or Proxyman exported — or to be written to one.
///
/// ```swift
/// let archive = try HARArchive(contentsOf: "Replays/fetchUser.har")
/// for exchange in archive.exchanges { print(exchange.method, exchange.url, exchange.response?.status ?? 0) }
/// ```
///
/// Written with sorted keys and two-space indentation, so a re-recorded fixture's diff shows
/// what changed. Bodies are text when they are UTF-8 and base64 otherwise; header fields keep
/// their order and repeats.
public struct HARArchive: Sendable, Hashable {
    /// The exchanges, in the order they started.
    public var exchanges: [HARExchange]

    /// An archive of these exchanges.
    ///
    /// - Parameter exchanges: The exchanges.
    public init(exchanges: [HARExchange] = []) {
        self.exchanges = exchanges
    }

    /// Reads the archive in `path`.
    ///
    /// - Parameter path: A `.har` file.
    /// - Throws: ``HARError`` when the file cannot be read or is not HAR.
    public init(contentsOf path: String) throws(HARError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HARError("cannot read the HAR file \(path)")
        }
        do {
            try self.init(data: data)
        } catch {
            throw HARError("\(path): \(error.message)")
        }
    }

    /// Reads an archive from its JSON.
    ///
    /// - Parameter data: HAR JSON.
    /// - Throws: ``HARError`` when it is not HAR 1.x, or an entry is invalid (a method or header
    ///   name that is not a token, a body marked base64 that is not).
    public init(data: Data) throws(HARError) {
        let file: HARFormat.File
        do {
            file = try JSONDecoder().decode(HARFormat.File.self, from: data)
        } catch {
            throw HARError("not an HTTP Archive: \(error)")
        }
        guard file.log.version.hasPrefix("1.") else {
            throw HARError("HAR version \(file.log.version) is not 1.x")
        }
        var exchanges: [HARExchange] = []
        for (index, entry) in file.log.entries.enumerated() {
            do throws(HARError) {
                exchanges.append(try HARExchange(entry))
            } catch {
                throw HARError("entry \(index) (\(entry.request.method) \(entry.request.url)): \(error.message)")
            }
        }
        self.exchanges = exchanges
    }

    /// The archive's JSON.
    ///
    /// - Returns: HAR 1.2 JSON, UTF-8.
    public func data() -> Data {
        let file = HARFormat.File(
            log: HARFormat.Log(
                version: "1.2",
                creator: HARFormat.Creator(name: "BrickRequest", version: BrickRequestVersion.string),
                entries: exchanges.map(\.entry)
            )
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Every field is a string, a number, a Bool or an array of them: encoding cannot fail.
        return (try? encoder.encode(file)) ?? Data()
    }

    /// Writes the archive to `path`, atomically (a reader sees the old file or the new one), creating
    /// the directory when it is missing.
    ///
    /// - Parameter path: Where.
    /// - Throws: ``HARError`` when the file cannot be written.
    public func write(to path: String) throws(HARError) {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
        do {
            if !directory.isEmpty {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            try data().write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw HARError("cannot write the HAR file \(path): \(error)")
        }
    }
}

extension HARExchange {
    /// Read from a HAR entry.
    init(_ entry: HARFormat.Entry) throws(HARError) {
        guard let method = HTTPRequest.Method(entry.request.method) else {
            throw HARError("the method \(entry.request.method.debugDescription) is not a token")
        }
        var requestBody: Data? = nil
        if let postData = entry.request.postData, postData._bodyNotRecorded == nil {
            requestBody = try HARFormat.body(text: postData.text, encoding: postData._encoding)
        }
        var failure: TransportError? = nil
        var response: HTTPResponse? = nil
        if let recorded = entry._brickError {
            failure = TransportError(
                TransportError.Kind.named(recorded.kind),
                message: recorded.message,
                requestBytesSent: recorded.requestBytesSent
            )
        } else if entry.response.status > 0 {
            guard (100...999).contains(entry.response.status) else {
                throw HARError("the status \(entry.response.status) is not a three-digit code")
            }
            response = HTTPResponse(
                status: HTTPResponse.Status(code: entry.response.status, reasonPhrase: entry.response.statusText),
                headerFields: Self.fields(entry.response.headers)
            )
        } else {
            // A browser's failed request (status 0, `_error: net::ERR_…`): no response arrived.
            failure = TransportError(.other, message: "the recorded request got no response (status 0)")
        }
        self.init(
            startedAt: HARFormat.date(isoString: entry.startedDateTime) ?? Date(timeIntervalSince1970: 0),
            method: method,
            url: entry.request.url,
            requestHeaders: Self.fields(entry.request.headers),
            requestBody: requestBody,
            response: response,
            responseBody: try HARFormat.body(text: entry.response.content.text, encoding: entry.response.content.encoding),
            failure: failure,
            metrics: Self.metrics(entry)
        )
    }

    /// Header fields from HAR's name/value pairs. HTTP/2 pseudo-header fields (`:authority`, as
    /// browsers list them) and names that are not tokens are left out.
    private static func fields(_ pairs: [HARFormat.NameValue]) -> HTTPFields {
        var fields = HTTPFields()
        for pair in pairs where !pair.name.hasPrefix(":") {
            guard let name = HTTPField.Name(pair.name) else { continue }
            fields.append(HTTPField(name: name, value: pair.value))
        }
        return fields
    }

    /// The longest time or timing read from a HAR file, in milliseconds (a year); longer ones are
    /// clamped to it.
    static let longestTiming: Double = 365 * 24 * 3600 * 1000

    private static func metrics(_ entry: HARFormat.Entry) -> TransportMetrics {
        // A HAR file is input: a time past a year (`1e16`, `1e300`, `inf`) is clamped to a year,
        // never converted as is (an Int64 conversion of it would trap).
        func duration(_ milliseconds: Double?) -> Duration {
            guard let milliseconds, milliseconds > 0 else { return .zero }
            let microseconds = min(milliseconds, Self.longestTiming) * 1000
            return .microseconds(Int64(microseconds))
        }
        let timings = entry.timings
        var metrics = TransportMetrics()
        metrics.nameLookup = duration(timings.dns)
        metrics.connect = metrics.nameLookup + duration(timings.connect)
        metrics.tlsHandshake = timings.ssl.map { $0 > 0 } == true ? metrics.connect : .zero
        metrics.firstByte = metrics.connect + duration(timings.send) + duration(timings.wait)
        metrics.total = duration(entry.time)
        metrics.connectionReused = (timings.connect ?? -1) < 0
        metrics.httpVersion =
            switch entry.response.httpVersion.uppercased() {
            case "HTTP/1.0": .http1_0
            case "HTTP/1.1": .http1_1
            case "HTTP/2", "HTTP/2.0", "H2": .http2
            case "HTTP/3", "H3": .http3
            default: .unknown
            }
        return metrics
    }

    /// Written as a HAR entry.
    var entry: HARFormat.Entry {
        let request = HARFormat.Request(
            method: method.rawValue,
            url: url,
            httpVersion: Self.versionText(metrics.httpVersion),
            cookies: [],
            headers: requestHeaders.map { HARFormat.NameValue(name: $0.name.rawName, value: $0.value) },
            queryString: Self.queryString(of: url),
            postData: requestBody.map { body in
                let (text, encoding) = HARFormat.text(of: body)
                return HARFormat.PostData(
                    mimeType: requestHeaders[.contentType] ?? "application/octet-stream",
                    text: text,
                    _encoding: encoding
                )
            },
            headersSize: -1,
            bodySize: requestBody?.count ?? 0
        )
        let (text, encoding) = HARFormat.text(of: responseBody)
        let responseEntry = HARFormat.Response(
            status: response.map { $0.status.code } ?? 0,
            statusText: response?.status.reasonPhrase ?? "",
            httpVersion: Self.versionText(metrics.httpVersion),
            cookies: [],
            headers: (response?.headerFields ?? [:]).map { HARFormat.NameValue(name: $0.name.rawName, value: $0.value) },
            content: HARFormat.Content(
                size: responseBody.count,
                mimeType: response?.headerFields[.contentType] ?? "",
                // Always present, "" for none: readers (haralyzer) expect it.
                text: responseBody.isEmpty ? "" : text,
                encoding: responseBody.isEmpty ? nil : encoding
            ),
            redirectURL: response?.headerFields[.location] ?? "",
            headersSize: -1,
            bodySize: response == nil ? -1 : responseBody.count
        )
        return HARFormat.Entry(
            startedDateTime: HARFormat.isoString(startedAt),
            time: Self.milliseconds(metrics.total),
            request: request,
            response: responseEntry,
            cache: HARFormat.Cache(),
            timings: Self.timings(metrics),
            _brickError: failure.map {
                HARFormat.Failure(kind: $0.kind.description, message: $0.message, requestBytesSent: $0.requestBytesSent)
            }
        )
    }

    private static func versionText(_ version: TransportMetrics.HTTPVersion) -> String {
        switch version {
        case .http1_0: "HTTP/1.0"
        case .http1_1: "HTTP/1.1"
        case .http2: "HTTP/2"
        case .http3: "HTTP/3"
        default: "unknown"
        }
    }

    private static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        let milliseconds = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        return (milliseconds * 1000).rounded() / 1000
    }

    /// HAR's phases from curl's cumulative times (all from the start of the transfer).
    private static func timings(_ metrics: TransportMetrics) -> HARFormat.Timings {
        let reused = metrics.connectionReused || metrics.connect == .zero
        let handshakeEnd = max(metrics.connect, metrics.tlsHandshake)
        return HARFormat.Timings(
            blocked: -1,
            dns: reused ? -1 : milliseconds(metrics.nameLookup),
            // HAR's `connect` includes `ssl`.
            connect: reused ? -1 : milliseconds(max(.zero, handshakeEnd - metrics.nameLookup)),
            send: 0,
            wait: milliseconds(max(.zero, metrics.firstByte - handshakeEnd)),
            receive: milliseconds(max(.zero, metrics.total - max(metrics.firstByte, handshakeEnd))),
            ssl: reused || metrics.tlsHandshake == .zero ? -1 : milliseconds(metrics.tlsHandshake - metrics.connect)
        )
    }

    /// The URL's query as HAR lists it: name/value pairs as they appear (not decoded).
    private static func queryString(of url: String) -> [HARFormat.NameValue] {
        guard let question = url.firstIndex(of: "?") else { return [] }
        let query = url[url.index(after: question)...].prefix { $0 != "#" }
        return query.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return HARFormat.NameValue(name: String(parts[0]), value: parts.count > 1 ? String(parts[1]) : "")
        }
    }
}

extension TransportError.Kind {
    /// The kind whose description is `name`; ``other`` for a name this build does not know.
    static func named(_ name: String) -> TransportError.Kind {
        let known: [TransportError.Kind] = [
            .notConnected, .cannotResolveHost, .cannotResolveProxy, .cannotConnect, .connectionReset, .timedOut,
            .tls, .tooManyRedirects, .redirectRefused, .bodyTooLarge, .invalidRequest, .invalidResponse, .fileIO,
            .requestBodyFailed, .outOfResources, .cancelled, .shutdown, .hostPaused, .rateLimited, .circuitOpen,
        ]
        return known.first { $0.description == name } ?? .other
    }
}
