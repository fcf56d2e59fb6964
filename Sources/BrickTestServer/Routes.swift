import Foundation

/// The server's normal answers (httpbin-like).
enum Routes {
    indirect enum Step {
        case script(ScriptedResponse)
        case delayed(Duration, then: Step)
        /// A chunked body of `count` chunks, each made when it is about to be written, `interval`
        /// apart, then ended as `ending` says.
        case chunked(
            status: Int,
            headers: [ScriptedResponse.HeaderPair],
            count: Int,
            interval: Duration = .zero,
            ending: ChunkedEnding = .finish,
            chunk: @Sendable (Int) -> [UInt8]
        )
    }

    /// What follows the last chunk of a `.chunked` step.
    enum ChunkedEnding {
        /// The terminating chunk: a complete response.
        case finish
        /// Nothing: the response never ends (the client has to stop reading).
        case hold
        /// A connection reset: the body breaks off.
        case reset
    }

    static func answer(_ request: RecordedRequest, port: Int, state: ServerState) -> Step {
        let step =
            request.path.hasPrefix("/cache/") ? .script(CacheRoute.answer(request, state: state)) : route(request, port: port)
        guard request.method == "HEAD", case .script(.respond(let status, var headers, let body)) = step else {
            return step
        }
        if !headers.contains(where: { $0.name.lowercased() == "content-length" }) {
            headers.append(.init("Content-Length", String(body.count)))
        }
        return .script(.respond(status: status, headers: headers, body: []))
    }

    private static func route(_ request: RecordedRequest, port: Int) -> Step {
        let components = request.path.split(separator: "/").map(String.init)
        let query = parseQuery(request.uri)
        func number(_ index: Int) -> Int? { components.count > index ? Int(components[index]) : nil }
        func int(_ name: String) -> Int? { query.first { $0.0 == name }.flatMap { Int($0.1) } }
        func double(_ name: String) -> Double? { query.first { $0.0 == name }.flatMap { Double($0.1) } }
        func string(_ name: String) -> String? { query.first { $0.0 == name }?.1 }

        switch components.first ?? "" {
        case "anything", "get", "post", "put", "patch", "delete":
            return .script(json(echo(request, port: port)))
        case "headers":
            return .script(json(["headers": headerDictionary(request)]))
        case "status":
            guard let code = number(1), (100...999).contains(code) else { return .script(.status(400)) }
            var headers: [ScriptedResponse.HeaderPair] = []
            if let retryAfter = string("retry_after") { headers.append(.init("Retry-After", retryAfter)) }
            if (300...399).contains(code) { headers.append(.init("Location", "/get")) }
            return .script(.respond(status: code, headers: headers, body: []))
        case "delay":
            let seconds = components.count > 1 ? Double(components[1]) ?? 1 : 1
            return .delayed(.milliseconds(Int(min(seconds, 60) * 1000)), then: .script(json(echo(request, port: port))))
        case "drip":
            let bytes = int("numbytes") ?? 10
            let duration = double("duration") ?? 2
            let delay = double("delay") ?? 0
            let code = int("code") ?? 200
            let interval = bytes > 0 ? Duration.milliseconds(Int(duration * 1000) / max(bytes, 1)) : .zero
            let drip: ScriptedResponse =
                code == 200 ? .slowDrip(totalBytes: bytes, interval: interval) : .respond(status: code)
            return delay > 0 ? .delayed(.milliseconds(Int(delay * 1000)), then: .script(drip)) : .script(drip)
        case "redirect":
            let hops = number(1) ?? 1
            let location = hops > 1 ? "/redirect/\(hops - 1)" : "/get"
            return .script(.respond(status: 302, headers: [.init("Location", location)]))
        case "redirect-to":
            guard let url = string("url") else { return .script(.status(400)) }
            return .script(.respond(status: int("status_code") ?? 302, headers: [.init("Location", url)]))
        case "gzip":
            let body: [UInt8]
            if let zeros = int("zeros") {
                body = Gzip.zeros(zeros)
            } else {
                var echoed = echo(request, port: port)
                echoed["gzipped"] = true
                body = Gzip.compress(
                    Array((try? JSONSerialization.data(withJSONObject: echoed, options: [.sortedKeys])) ?? Data())
                )
            }
            return .script(
                .respond(
                    status: 200,
                    headers: [
                        .init("Content-Encoding", "gzip"), .init("Content-Type", "application/json"),
                    ],
                    body: body
                )
            )
        case "bytes":
            let count = min(number(1) ?? 0, 512 * 1024 * 1024)
            return .script(
                .respond(
                    status: 200,
                    headers: [.init("Content-Type", "application/octet-stream")],
                    body: pattern(from: 0, count: count)
                )
            )
        case "range":
            return rangeRoute(request, count: min(number(1) ?? 0, 512 * 1024 * 1024), etag: string("etag"))
        case "sse":
            // Event i: `id: i`, `event: tick`, two data lines; a comment first; CRLF line ends. A
            // `Last-Event-ID` continues after that event; without one, `cut_after=K` breaks the
            // stream off after K events, in the middle of the next.
            let count = min(number(1) ?? 3, 10_000)
            let lastID = request.header("Last-Event-ID")
            let first = lastID.flatMap { Int($0) }.map { $0 + 1 } ?? 0
            let cutAfter = lastID == nil ? int("cut_after").flatMap { $0 < count ? max($0, 0) : nil } : nil
            let end = cutAfter ?? count
            let events = (min(first, end)..<end).map { index in
                Array("id: \(index)\r\nevent: tick\r\ndata: tick \(index)\r\ndata: line 2\r\n\r\n".utf8)
            }
            let broken = cutAfter.map { [Array("id: \($0)\r\ndata: half an ev".utf8)] } ?? []
            let chunks = [Array(": stream of \(count) events\r\n".utf8)] + events + broken
            return .chunked(
                status: 200,
                headers: [.init("Content-Type", "text/event-stream"), .init("Cache-Control", "no-cache")],
                count: chunks.count,
                interval: .milliseconds(int("interval_ms") ?? 0),
                ending: cutAfter != nil ? .reset : int("hold") == 1 ? .hold : .finish
            ) { chunks[$0] }
        case "stream":
            let lineCount = min(number(1) ?? 1, 10_000)
            let echoed = echo(request, port: port)
            let lines = (0..<lineCount).map { index -> [UInt8] in
                var line = echoed
                line["id"] = index
                return Array((try? JSONSerialization.data(withJSONObject: line, options: [.sortedKeys])) ?? Data()) + [
                    0x0A
                ]
            }
            return .chunked(status: 200, headers: [.init("Content-Type", "application/json")], count: lines.count) {
                lines[$0]
            }
        case "stream-bytes":
            let total = min(number(1) ?? 0, 512 * 1024 * 1024)
            let size = max(int("chunk_size") ?? 10 * 1024, 1)
            let count = (total + size - 1) / size
            return .chunked(status: 200, headers: [.init("Content-Type", "application/octet-stream")], count: count) {
                index in
                pattern(from: index * size, count: min(size, total - index * size))
            }
        case "response-headers":
            return .script(.respond(status: 200, headers: query.map { .init($0.0, $0.1) }, body: []))
        default:
            return .script(
                .respond(status: 404, headers: [.init("Content-Type", "text/plain")], body: Array("not found".utf8))
            )
        }
    }

    /// `/range/N`: N pattern bytes with an `ETag` (`"range-N"`, or `"<etag>"` from the query, to
    /// play a resource that changed) and `Accept-Ranges: bytes`. A `Range: bytes=a-`, `bytes=a-b` or
    /// `bytes=-n` header gets a 206 with `Content-Range` (416 when it cannot be satisfied), unless
    /// an `If-Range` names another entity tag, which gets the whole body with a 200.
    private static func rangeRoute(_ request: RecordedRequest, count: Int, etag: String?) -> Step {
        let tag = "\"" + (etag ?? "range-\(count)") + "\""
        var headers: [ScriptedResponse.HeaderPair] = [
            .init("Content-Type", "application/octet-stream"), .init("ETag", tag), .init("Accept-Ranges", "bytes"),
        ]
        guard let range = request.header("Range"), request.header("If-Range").map({ $0 == tag }) ?? true else {
            return .script(.respond(status: 200, headers: headers, body: pattern(from: 0, count: count)))
        }
        guard let (first, last) = byteRange(range, count: count) else {
            headers.append(.init("Content-Range", "bytes */\(count)"))
            return .script(.respond(status: 416, headers: headers))
        }
        headers.append(.init("Content-Range", "bytes \(first)-\(last)/\(count)"))
        return .script(.respond(status: 206, headers: headers, body: pattern(from: first, count: last - first + 1)))
    }

    /// The first and last offsets of a single `bytes=` range within `count` bytes, or `nil`.
    private static func byteRange(_ header: String, count: Int) -> (Int, Int)? {
        guard header.hasPrefix("bytes="), !header.contains(",") else { return nil }
        let bounds = header.dropFirst(6).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2 else { return nil }
        if bounds[0].isEmpty {
            guard let suffix = Int(bounds[1]), suffix > 0, count > 0 else { return nil }
            return (max(count - suffix, 0), count - 1)
        }
        guard let first = Int(bounds[0]), first < count else { return nil }
        let last = bounds[1].isEmpty ? count - 1 : min(Int(bounds[1]) ?? -1, count - 1)
        return last >= first ? (first, last) : nil
    }

    private static let cycle: [UInt8] = (0..<256).map { UInt8($0) }

    /// Bytes `offset % 256` for `offset` in `start..<start+count`, built from 256-byte slices.
    static func pattern(from start: Int, count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        var position = start
        while bytes.count < count {
            let phase = position % 256
            let take = min(256 - phase, count - bytes.count)
            bytes.append(contentsOf: cycle[phase..<(phase + take)])
            position += take
        }
        return bytes
    }

    private static func json(_ object: [String: Any]) -> ScriptedResponse {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return .respond(status: 200, headers: [.init("Content-Type", "application/json")], body: Array(data))
    }

    static func headerDictionary(_ request: RecordedRequest) -> [String: String] {
        var headers: [String: String] = [:]
        for header in request.headers {
            let key = header.name.lowercased()
            headers[key] = headers[key].map { "\($0), \(header.value)" } ?? header.value
        }
        return headers
    }

    /// The JSON echo: method, path, url, args, headers, data, form, files and parsed json.
    static func echo(_ request: RecordedRequest, port: Int) -> [String: Any] {
        var args: [String: Any] = [:]
        for (name, value) in parseQuery(request.uri) {
            switch args[name] {
            case nil: args[name] = value
            case let list as [String]: args[name] = list + [value]
            case let single as String: args[name] = [single, value]
            default: break
            }
        }
        var form: [String: Any] = [:]
        var files: [String: Any] = [:]
        let contentType = request.header("Content-Type") ?? ""
        if contentType.lowercased().hasPrefix("application/x-www-form-urlencoded") {
            for (name, value) in parsePairs(String(decoding: request.body, as: UTF8.self)) {
                form[name] =
                    form[name].map { existing -> Any in
                        (existing as? [String] ?? [existing as? String ?? ""]) + [value]
                    } ?? value
            }
        } else if contentType.lowercased().hasPrefix("multipart/form-data"), let boundary = boundary(contentType) {
            for part in Multipart.parse(request.body, boundary: boundary) {
                if let fileName = part.fileName {
                    files[part.name] = [
                        "filename": fileName, "content_type": part.contentType ?? "",
                        "size": part.body.count, "base64": Data(part.body).base64EncodedString(),
                    ]
                } else {
                    form[part.name] = String(decoding: part.body, as: UTF8.self)
                }
            }
        }
        var object: [String: Any] = [
            "method": request.method, "path": request.path,
            "url": "http://127.0.0.1:\(port)\(request.uri)", "args": args,
            "headers": headerDictionary(request), "data": String(decoding: request.body, as: UTF8.self),
            "form": form, "files": files,
            "connection": request.connection, "index_on_connection": request.indexOnConnection,
        ]
        if contentType.lowercased().hasPrefix("application/json"),
            let parsed = try? JSONSerialization.jsonObject(with: Data(request.body), options: [.fragmentsAllowed])
        {
            object["json"] = parsed
        }
        return object
    }

    static func parseQuery(_ uri: String) -> [(String, String)] {
        guard let mark = uri.firstIndex(of: "?") else { return [] }
        return parsePairs(String(uri[uri.index(after: mark)...]))
    }

    static func parsePairs(_ text: String) -> [(String, String)] {
        text.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                String(part).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(part)
            }
            return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
        }
    }

    private static func boundary(_ contentType: String) -> String? {
        for parameter in contentType.split(separator: ";").dropFirst() {
            let trimmed = parameter.trimmingCharacters(in: .whitespaces)
            if trimmed.lowercased().hasPrefix("boundary=") {
                return String(trimmed.dropFirst("boundary=".count)).trimmingCharacters(
                    in: CharacterSet(charactersIn: "\"")
                )
            }
        }
        return nil
    }
}

/// A minimal multipart/form-data parser for the echo.
enum Multipart {
    struct Part {
        var name: String
        var fileName: String?
        var contentType: String?
        var body: [UInt8]
    }

    static func parse(_ body: [UInt8], boundary: String) -> [Part] {
        let delimiter = Array("--\(boundary)".utf8)
        var parts: [Part] = []
        var positions: [Int] = []
        var index = 0
        while let found = find(delimiter, in: body, from: index) {
            positions.append(found)
            index = found + delimiter.count
        }
        for (start, end) in zip(positions, positions.dropFirst()) {
            var partStart = start + delimiter.count
            if body.count > partStart + 1 && body[partStart] == 0x0D && body[partStart + 1] == 0x0A { partStart += 2 }
            var partEnd = end
            if partEnd >= 2 && body[partEnd - 2] == 0x0D && body[partEnd - 1] == 0x0A { partEnd -= 2 }
            guard partStart <= partEnd, let headerEnd = find(Array("\r\n\r\n".utf8), in: body, from: partStart),
                headerEnd <= partEnd
            else { continue }
            let headerText = String(decoding: body[partStart..<headerEnd], as: UTF8.self)
            var part = Part(name: "", fileName: nil, contentType: nil, body: Array(body[(headerEnd + 4)..<partEnd]))
            for line in headerText.components(separatedBy: "\r\n") {
                let lower = line.lowercased()
                if lower.hasPrefix("content-disposition:") {
                    part.name = parameter("name", in: line) ?? ""
                    part.fileName = parameter("filename", in: line)
                } else if lower.hasPrefix("content-type:") {
                    part.contentType = line.dropFirst("content-type:".count).trimmingCharacters(in: .whitespaces)
                }
            }
            parts.append(part)
        }
        return parts
    }

    private static func parameter(_ name: String, in line: String) -> String? {
        for piece in line.split(separator: ";").dropFirst() {
            let trimmed = piece.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("\(name)=") else { continue }
            var value = String(trimmed.dropFirst(name.count + 1))
            if value.hasPrefix("\"") && value.hasSuffix("\"") && value.count >= 2 {
                value = String(value.dropFirst().dropLast())
            }
            return value
        }
        return nil
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard needle.count <= haystack.count, start <= haystack.count - needle.count else { return nil }
        var index = start
        let first = needle[0]
        while index <= haystack.count - needle.count {
            if haystack[index] == first && Array(haystack[index..<(index + needle.count)]) == needle { return index }
            index += 1
        }
        return nil
    }
}
