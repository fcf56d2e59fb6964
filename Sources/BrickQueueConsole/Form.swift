import BrickOfflineCore
import BrickRequest
import Foundation
import Hummingbird

/// An `application/x-www-form-urlencoded` body, as the console's forms send it.
struct Form {
    private(set) var fields: [String: String] = [:]

    subscript(name: String) -> String? { fields[name] }

    /// The "Retry at a new URL" fields (`rewrite_from`, `rewrite_to`) as a rewrite, or `nil` when
    /// both are empty or absent.
    func rewrite() throws(BrickError) -> URLRewrite? {
        let (from, to) = (self["rewrite_from"] ?? "", self["rewrite_to"] ?? "")
        if from.isEmpty && to.isEmpty { return nil }
        return try URLRewrite(prefix: from, replacement: to)
    }

    /// The form in `request`'s body (at most 64 KiB), which stays readable for the next reader.
    static func read(_ request: inout Request) async throws -> Form {
        let buffer = try await request.collectBody(upTo: 64 * 1024)
        return Form(String(buffer: buffer))
    }

    init(_ encoded: String) {
        for pair in encoded.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ text: Substring) -> String {
                String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(text)
            }
            fields[decoded(parts[0])] = parts.count > 1 ? decoded(parts[1]) : ""
        }
    }
}
