import Foundation

/// `/cache/NAME`: a resource with the fields HTTP caching reads, and conditional requests
/// answered with `304` (see the route table of ``BrickTestServer``).
enum CacheRoute {
    /// Last-Modified of version 1; each version is a day later.
    private static let firstModified = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01

    static func answer(_ request: RecordedRequest, state: ServerState) -> ScriptedResponse {
        let query = Routes.parseQuery(request.uri)
        func value(_ name: String) -> String? { query.first { $0.0 == name }?.1 }
        let status = value("status").flatMap { Int($0) } ?? 200
        let now = Date()
        var tag: String? = nil
        var modified: Date? = nil
        let (version, served) = state.cacheResource(request.path) { version in
            tag = value("etag") == "0" ? nil : "\"v\(version)\""
            modified = value("lm") == "0" ? nil : firstModified.addingTimeInterval(Double(version - 1) * 86_400)
            guard status == 200 else { return false }
            if let condition = request.header("If-None-Match") {
                guard let tag else { return false }
                return condition == "*" || condition.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == tag }
            }
            if let condition = request.header("If-Modified-Since"), let since = parse(condition), let modified {
                return modified <= since
            }
            return false
        }
        var headers: [ScriptedResponse.HeaderPair] = [.init("Date", format(now))]
        if let cc = value("cc") {
            headers.append(.init("Cache-Control", cc))
        } else if let maxAge = value("max_age") {
            headers.append(.init("Cache-Control", "max-age=\(maxAge)"))
        }
        if let tag { headers.append(.init("ETag", tag)) }
        if let modified { headers.append(.init("Last-Modified", format(modified))) }
        if let age = value("age") { headers.append(.init("Age", age)) }
        if let expires = value("expires").flatMap(Double.init) {
            headers.append(.init("Expires", format(now.addingTimeInterval(expires))))
        }
        let varied = value("vary").map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
        if !varied.isEmpty { headers.append(.init("Vary", varied.joined(separator: ", "))) }
        guard let served else {
            return .respond(status: 304, headers: headers, body: [])
        }
        var varyValues: [String: String] = [:]
        for name in varied { varyValues[name.lowercased()] = request.header(name) ?? "" }
        let object: [String: Any] = ["path": request.path, "version": version, "vary": varyValues, "served": served]
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        headers.append(.init("Content-Type", "application/json"))
        return .respond(status: status, headers: headers, body: Array(body))
    }

    private static func formatter() -> DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter
    }

    static func format(_ date: Date) -> String { formatter().string(from: date) }

    static func parse(_ text: String) -> Date? { formatter().date(from: text) }
}
