@testable import BrickRequestCore
import FoundationEssentials
import PropertyBased
import Testing

/// The IMF-fixdate fast path (read from bytes on every cache hit) against the parser of every
/// form: for any date, in any letter case, and for any text one byte away from one, both give the
/// same answer — the fast path answers only what it reads exactly as the general parser does.
@Suite("HTTP-date: the fixdate fast path agrees with the general parser", .timeLimit(.minutes(3)))
struct HTTPDatePropertyTests {
    static let days = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]  // 1970-01-01 was a Thursday
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// `seconds` since 1970 as an IMF-fixdate, by the calendar arithmetic spelled out here.
    static func fixdate(_ seconds: Int) -> String {
        let days = seconds / 86_400
        let time = seconds % 86_400
        // Civil date from days (Howard Hinnant's algorithm, written out independently of the parser's).
        let z = days + 719_468
        let era = z / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let yearText = String(repeating: "0", count: max(0, 4 - "\(year)".count)) + "\(year)"
        return "\(Self.days[days % 7]), \(two(day)) \(Self.months[month - 1]) \(yearText) \(two(time / 3600)):\(two(time / 60 % 60)):\(two(time % 60)) GMT"
    }

    static func fast(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { HTTPDate.fixdate($0) }
    }

    @Test("any date from 1970 to 9999, its letters in any case: the same date from both, and the one written")
    func anyDate() async {
        await propertyCheck(count: 2000, input: Gen.int(in: 0...253_402_300_799), Gen.int(in: 0...(1 << 12))) { seconds, caseBits in
            var text = Self.fixdate(seconds)
            // Flip the case of letters by the bits of `caseBits`.
            var letter = 0
            text = String(
                text.map { character -> Character in
                    guard character.isLetter else { return character }
                    defer { letter += 1 }
                    return caseBits >> (letter % 12) & 1 == 1 ? Character(character.uppercased()) : Character(character.lowercased())
                }
            )
            let expected = Date(timeIntervalSince1970: Double(seconds))
            #expect(Self.fast(text) == expected, "\(text)")
            #expect(HTTPDate.parseAnyForm(text, now: expected) == expected, "\(text)")
            #expect(HTTPDate.parse(text, now: expected) == expected, "\(text)")
        }
    }

    @Test("a text one byte away from a date (any byte, anywhere): the fast path answers as the general parser, or leaves it to it")
    func mutated() async {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        await propertyCheck(count: 4000, input: Gen.int(in: 0...4_102_444_800), Gen.int(in: 0...28), Gen.int(in: 0...255)) { seconds, position, byte in
            var bytes = Array(Self.fixdate(seconds).utf8)
            bytes[position] = UInt8(byte)
            let text = String(decoding: bytes, as: UTF8.self)
            let general = HTTPDate.parseAnyForm(text, now: now)
            if let fast = Self.fast(text) { #expect(fast == general, "\(text.debugDescription)") }
            #expect(HTTPDate.parse(text, now: now) == general, "\(text.debugDescription)")
        }
    }

    @Test("days and times out of range, and the other two forms, are read as before")
    func table() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        for text in [
            "Sun, 31 Feb 2001 01:47:00 GMT", "Sun, 29 Feb 2001 01:47:00 GMT", "Tue, 29 Feb 2000 01:47:00 GMT",
            "Sun, 09 Sep 2001 24:00:00 GMT", "Sun, 09 Sep 2001 23:60:00 GMT", "Sun, 09 Sep 2001 23:59:60 GMT",
            "Sun, 09 Sep 2001 01:47:00 UTC", "Xyz, 09 Sep 2001 01:47:00 GMT", "Sun, 09 Sep 0000 01:47:00 GMT",
            "Sun,  09 Sep 2001 01:47:00 GMT", "Sunday, 09-Sep-01 01:47:00 GMT", "Sun Sep  9 01:47:00 2001",
        ] {
            #expect(HTTPDate.parse(text, now: now) == HTTPDate.parseAnyForm(text, now: now), "\(text)")
        }
        #expect(HTTPDate.parse("Tue, 29 Feb 2000 01:47:00 GMT", now: now) == Date(timeIntervalSince1970: 951_788_820))
        #expect(HTTPDate.parse("Sun, 31 Feb 2001 01:47:00 GMT", now: now) == nil)
        #expect(HTTPDate.parse("Sun, 09 Sep 2001 23:59:60 GMT", now: now) == Date(timeIntervalSince1970: 1_000_079_999 + 1))
    }
}
