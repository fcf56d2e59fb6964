import FoundationEssentials
import Glibc

/// The JSON of an HTTP Archive, version 1.2 (W3C's draft "HTTP Archive (HAR) format", as browsers'
/// developer tools, Charles and Proxyman write it). Only what an exchange needs is modelled:
/// fields written by others and not listed here (`pages`, `_initiator`, `_transferSize`, …) are
/// ignored when reading. BrickHAR's own additions start with `_`, as the format allows.
enum HARFormat {
    struct File: Codable {
        var log: Log
    }

    struct Log: Codable {
        var version: String
        var creator: Creator
        var browser: Creator?
        var entries: [Entry]
        var comment: String?
    }

    struct Creator: Codable {
        var name: String
        var version: String
    }

    struct Entry: Codable {
        var pageref: String?
        var startedDateTime: String
        var time: Double
        var request: Request
        var response: Response
        var cache: Cache
        var timings: Timings
        var serverIPAddress: String?
        var connection: String?
        var comment: String?
        /// BrickHAR's: the transport failure that ended the exchange (its response then has status 0).
        var _brickError: Failure?
    }

    struct Failure: Codable {
        var kind: String
        var message: String
        var requestBytesSent: Bool
    }

    struct NameValue: Codable {
        var name: String
        var value: String
    }

    struct Cookie: Codable {
        var name: String
        var value: String
    }

    struct Request: Codable {
        var method: String
        var url: String
        var httpVersion: String
        var cookies: [Cookie]
        var headers: [NameValue]
        var queryString: [NameValue]
        var postData: PostData?
        var headersSize: Int
        var bodySize: Int
    }

    struct PostData: Codable {
        var mimeType: String
        var text: String?
        /// BrickHAR's: `base64` when `text` holds a binary body in base64 (HAR 1.2 has `encoding`
        /// only on a response's content).
        var _encoding: String?
        /// BrickHAR's: the body was not kept (a stream, or past the recorder's cap).
        var _bodyNotRecorded: String?
    }

    struct Response: Codable {
        var status: Int
        var statusText: String
        var httpVersion: String
        var cookies: [Cookie]
        var headers: [NameValue]
        var content: Content
        var redirectURL: String
        var headersSize: Int
        var bodySize: Int
    }

    struct Content: Codable {
        var size: Int
        var mimeType: String
        var text: String?
        var encoding: String?
        var comment: String?
    }

    /// Empty: nothing is known of a browser cache here.
    struct Cache: Codable {}

    /// Milliseconds; -1 where the phase did not happen (a reused connection has no `dns`,
    /// `connect` or `ssl`).
    struct Timings: Codable {
        var blocked: Double?
        var dns: Double?
        var connect: Double?
        var send: Double
        var wait: Double
        var receive: Double
        var ssl: Double?
    }
}

extension HARFormat {
    /// A body as HAR keeps it: UTF-8 as text, anything else in base64.
    static func text(of body: Data) -> (text: String, encoding: String?) {
        if let text = String(validating: body, as: UTF8.self) { return (text, nil) }
        return (body.base64EncodedString(), "base64")
    }

    /// The bytes of a HAR body.
    static func body(text: String?, encoding: String?) throws(HARError) -> Data {
        guard let text else { return Data() }
        guard encoding == "base64" else { return Data(text.utf8) }
        guard let data = Data(base64Encoded: text) else {
            throw HARError("a body marked base64 is not valid base64")
        }
        return data
    }

    /// `2026-11-28T03:40:00.123Z` for `date`.
    static func isoString(_ date: Date) -> String {
        // Years 0001–9999 only (a date out of them, or NaN, is written at the nearest end).
        let since1970 = date.timeIntervalSince1970 * 1000
        let bounded = since1970.isNaN ? 0 : min(max(since1970, -62_135_596_800_000), 253_402_300_799_999)
        let milliseconds = Int64(bounded.rounded(.down))
        var seconds = time_t(milliseconds.quotientAndRemainder(dividingBy: 1000).quotient)
        var millis = Int(milliseconds - Int64(seconds) * 1000)
        if millis < 0 {
            millis += 1000
            seconds -= 1
        }
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func padded(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(padded(parts.tm_year + 1900, 4))-\(padded(parts.tm_mon + 1, 2))-\(padded(parts.tm_mday, 2))"
            + "T\(padded(parts.tm_hour, 2)):\(padded(parts.tm_min, 2)):\(padded(parts.tm_sec, 2))"
            + ".\(padded(Int32(millis), 3))Z"
    }

    /// The date of an ISO 8601 date-time as HAR writes it (`…T…[.fraction](Z|±hh:mm)`), or `nil`.
    static func date(isoString string: String) -> Date? {
        let bytes = Array(string.utf8)
        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<start + count] {
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard bytes.count >= 19, let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
            let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2)
        else { return nil }
        var index = 19
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        var offset = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            guard let hours = number(index + 1, 2), let minutes = number(index + 4, 2) else { return nil }
            offset = (hours * 60 + minutes) * 60 * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
        }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        return Date(timeIntervalSince1970: Double(seconds - offset) + fraction)
    }
}

/// An HTTP Archive that could not be read or written: not JSON, not HAR, a body that does not
/// decode, a file that cannot be opened.
public struct HARError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, and where.
    public let message: String

    /// An error with this message.
    ///
    /// - Parameter message: What went wrong, and where.
    package init(_ message: String) {
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
