import FoundationEssentials

/// Parses `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date (IMF-fixdate, RFC 850
/// or asctime form).
package enum RetryAfterParsing {
    /// The delay a `Retry-After` value asks for, measured from `now` (delta-seconds saturate at
    /// 2^31 s).
    ///
    /// - Parameters:
    ///   - value: The header's value.
    ///   - now: The current time (a date in the past gives zero).
    /// - Returns: The delay, or `nil` when the value is neither a number of seconds nor a date.
    package static func delay(_ value: String, now: Date) -> Duration? {
        let trimmed = value.trimmingSpacesAndTabs()
        // delta-seconds: a value too large for an integer saturates (at 2^31 s) like any other huge
        // one, never reads as nothing.
        if let seconds = trimmed.deltaSecondsValue { return .seconds(seconds) }
        guard let date = HTTPDate.parse(trimmed, now: now) else { return nil }
        let interval = date.timeIntervalSince(now)
        return interval <= 0 ? .zero : .milliseconds(Int64((interval * 1000).rounded(.up)))
    }
}

/// HTTP-date (RFC 9110 §5.6.7) in its three forms, always GMT:
/// `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT`, `Sun Nov  6 08:49:37 1994`.
enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let dayNames = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    private static let longDayNames = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// The date `text` names, or `nil` when it is not an HTTP-date. `now` resolves the two-digit
    /// year of the RFC 850 form (a year more than 50 years ahead is taken from the last century).
    static func parse(_ text: String, now: Date) -> Date? {
        // Every cached response's `Date` is read on every hit: its usual form first, from bytes.
        if let date = text.utf8.withContiguousStorageIfAvailable(fixdate) ?? nil { return date }
        return parseAnyForm(text, now: now)
    }

    /// The exact IMF-fixdate layout, `Sun, 06 Nov 1994 08:49:37 GMT` (names in any case), read
    /// from its bytes; `nil` for anything else — which ``parseAnyForm(_:now:)`` then reads, so the
    /// two agree on every text this accepts (a property test holds them to it).
    package static func fixdate(_ bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20, bytes[11] == 0x20,
            bytes[16] == 0x20, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 0x20,
            let dayName = lowercased3(bytes, 0), dayKeys.contains(dayName),
            let monthName = lowercased3(bytes, 8), let monthIndex = monthKeys.firstIndex(of: monthName),
            lowercased3(bytes, 26) == gmtKey,
            let day = digits(bytes, 5, 2), let year = digits(bytes, 12, 4), let hour = digits(bytes, 17, 2),
            let minute = digits(bytes, 20, 2), let second = digits(bytes, 23, 2)
        else { return nil }
        let month = monthIndex + 1
        guard year >= 1, (1...daysIn(month: month, year: year)).contains(day), hour <= 23, minute <= 59, second <= 60 else {
            return nil
        }
        let days = daysSinceEpoch(year: year, month: month, day: day)
        return Date(timeIntervalSince1970: Double(((days * 24 + hour) * 60 + minute) * 60 + second))
    }

    /// Three ASCII letters at `offset`, lower-cased and packed; `nil` if any is not a letter.
    @inline(__always)
    private static func lowercased3(_ bytes: UnsafeBufferPointer<UInt8>, _ offset: Int) -> UInt32? {
        var packed: UInt32 = 0
        for index in offset..<offset + 3 {
            let lower = bytes[index] | 0x20
            guard lower >= UInt8(ascii: "a"), lower <= UInt8(ascii: "z") else { return nil }
            packed = packed << 8 | UInt32(lower)
        }
        return packed
    }

    /// `count` decimal digits at `offset` as a number; `nil` if any is not a digit.
    @inline(__always)
    private static func digits(_ bytes: UnsafeBufferPointer<UInt8>, _ offset: Int, _ count: Int) -> Int? {
        var value = 0
        for index in offset..<offset + count {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit <= 9 else { return nil }
            value = value * 10 + Int(digit)
        }
        return value
    }

    private static func key(_ name: String) -> UInt32 {
        name.utf8.reduce(0) { $0 << 8 | UInt32($1) }
    }

    private static let dayKeys = dayNames.map { key($0) }
    private static let monthKeys = months.map { key($0) }
    private static let gmtKey = key("gmt")

    /// Every form RFC 9110 §5.6.7 allows, from the text's tokens.
    package static func parseAnyForm(_ text: String, now: Date) -> Date? {
        let tokens = text.split(separator: " ", omittingEmptySubsequences: true).map { $0.lowercased() }
        let day: Int?
        let month: Int?
        let year: Int?
        let time: (Int, Int, Int)?
        switch tokens.count {
        case 6:  // IMF-fixdate
            guard tokens[0].hasSuffix(","), dayNames.contains(String(tokens[0].dropLast())), tokens[5] == "gmt",
                tokens[1].count == 2, tokens[3].count == 4
            else { return nil }
            (day, month, year, time) = (
                number(tokens[1]), monthNumber(tokens[2]), number(tokens[3]), timeOfDay(tokens[4])
            )
        case 4:  // RFC 850
            let date = tokens[1].split(separator: "-", omittingEmptySubsequences: false)
            guard tokens[0].hasSuffix(","), longDayNames.contains(String(tokens[0].dropLast())), tokens[3] == "gmt",
                date.count == 3, date[0].count == 2, date[2].count == 2, let shortYear = number(date[2])
            else { return nil }
            day = number(date[0])
            month = monthNumber(String(date[1]))
            year = fullYear(twoDigit: shortYear, now: now)
            time = timeOfDay(tokens[2])
        case 5:  // asctime
            guard dayNames.contains(tokens[0]), tokens[2].count <= 2, tokens[4].count == 4 else { return nil }
            (day, month, year, time) = (
                number(tokens[2]), monthNumber(tokens[1]), number(tokens[4]), timeOfDay(tokens[3])
            )
        default:
            return nil
        }
        guard let day, let month, let year, let (hour, minute, second) = time, year >= 1,
            (1...daysIn(month: month, year: year)).contains(day)
        else { return nil }
        let days = daysSinceEpoch(year: year, month: month, day: day)
        return Date(timeIntervalSince1970: Double(((days * 24 + hour) * 60 + minute) * 60 + second))
    }

    /// Decimal digits only, as an `Int`.
    private static func number(_ text: some StringProtocol) -> Int? {
        text.decimalDigitsValue.flatMap { Int(exactly: $0) }
    }

    private static func monthNumber(_ name: String) -> Int? {
        months.firstIndex(of: name).map { $0 + 1 }
    }

    /// `HH:MM:SS`, with a leap second allowed.
    private static func timeOfDay(_ text: String) -> (Int, Int, Int)? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ $0.count == 2 }), let hour = number(parts[0]),
            let minute = number(parts[1]),
            let second = number(parts[2]), (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        return (hour, minute, second)
    }

    private static func fullYear(twoDigit: Int, now: Date) -> Int? {
        guard (0...99).contains(twoDigit) else { return nil }
        let currentYear = civilYear(daysSinceEpoch: Int((now.timeIntervalSince1970 / 86_400).rounded(.down)))
        var year = currentYear - currentYear % 100 + twoDigit
        if year > currentYear + 50 { year -= 100 }
        return year
    }

    private static func isLeap(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days from 1970-01-01 to the given day of the proleptic Gregorian calendar.
    private static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        // Years counted from March, so that the leap day ends a year.
        let marchYear = month <= 2 ? year - 1 : year
        let era = (marchYear >= 0 ? marchYear : marchYear - 399) / 400
        let yearOfEra = marchYear - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The calendar year that contains the given day (the inverse of ``daysSinceEpoch(year:month:day:)``).
    private static func civilYear(daysSinceEpoch days: Int) -> Int {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let marchMonth = (5 * dayOfYear + 2) / 153
        return yearOfEra + era * 400 + (marchMonth >= 10 ? 1 : 0)
    }
}
