import Foundation

/// Parses `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date (IMF-fixdate, RFC 850
/// or asctime form).
public enum RetryAfterParsing {
    /// The delay a `Retry-After` value asks for, measured from `now`.
    ///
    /// - Parameters:
    ///   - value: The header's value.
    ///   - now: The current time (a date in the past gives zero).
    /// - Returns: The delay, or `nil` when the value is neither a number of seconds nor a date.
    public static func delay(_ value: String, now: Date) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(trimmed), seconds >= 0 { return .seconds(seconds) }
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: trimmed) {
                let interval = date.timeIntervalSince(now)
                return interval <= 0 ? .zero : .milliseconds(Int64((interval * 1000).rounded(.up)))
            }
        }
        return nil
    }
}
