@testable import BrickRequestCore
import FoundationEssentials
import HTTPTypes
import PropertyBased
import Testing

/// `Cache-Control` directives read from bytes (as every cache hit reads them) against a model that
/// reads them character by character, as the parser did before: for any text of the characters
/// that matter (delimiters, quotes, escapes, spaces, tabs, letters of both cases, a non-ASCII
/// letter), the same directives; and the facts a stored response's fields give do not depend on
/// the order of unrelated fields or on one field given on two lines.
@Suite("Cache-Control: the byte reader agrees with a character model", .timeLimit(.minutes(3)))
struct CacheControlPropertyTests {
    /// The model: `name[=token|quoted-string]` items, names lower-cased, commas inside quotes kept.
    static func model(_ value: String) -> [(String, String?)] {
        var result: [(String, String?)] = []
        var item = ""
        var quoted = false
        var escaped = false
        func flush() {
            let trimmed = item.trimmingSpacesAndTabs()
            item = ""
            guard !trimmed.isEmpty else { return }
            if let equals = trimmed.firstIndex(of: "=") {
                let name = trimmed[..<equals].trimmingSpacesAndTabs().lowercased()
                var argument = trimmed[trimmed.index(after: equals)...].trimmingSpacesAndTabs()
                if argument.count >= 2, argument.hasPrefix("\""), argument.hasSuffix("\"") {
                    argument = String(argument.dropFirst().dropLast()).replacing("\\", with: "")
                }
                result.append((name, argument))
            } else {
                result.append((trimmed.lowercased(), nil))
            }
        }
        for character in value {
            if escaped {
                escaped = false
            } else if quoted && character == "\\" {
                escaped = true
            } else if character == "\"" {
                quoted.toggle()
            } else if character == "," && !quoted {
                flush()
                continue
            }
            item.append(character)
        }
        flush()
        return result
    }

    static let alphabet: [String] = [
        "m", "a", "x", "-", "g", "e", "=", ",", "\"", "\\", " ", "\t", "1", "0", "M", "A", "X", "N", "o", "é", "max-age",
        "no-cache", "private", "=\"", "\",",
    ]

    @Test("any text: the same directives as the character model")
    func directives() async {
        await propertyCheck(count: 3000, input: Gen.int(in: 0...(Self.alphabet.count - 1)).array(of: 0...30)) { picks in
            let text = picks.map { Self.alphabet[$0] }.joined()
            let read = CacheControl.directives(text)
            let expected = Self.model(text)
            #expect(read.map(\.0) == expected.map(\.0), "\(text.debugDescription)")
            #expect(read.map(\.1) == expected.map(\.1), "\(text.debugDescription)")
        }
    }

    @Test("a stored response's facts: the same whatever the order of other fields, and a field on two lines reads joined")
    func facts() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        var fields = HTTPFields()
        fields[.contentType] = "text/plain"
        fields.append(HTTPField(name: .cacheControl, value: "max-age=60"))
        fields.append(HTTPField(name: .date, value: "Tue, 14 Nov 2023 22:13:00 GMT"))
        fields.append(HTTPField(name: .eTag, value: "\"a\""))
        fields.append(HTTPField(name: .age, value: "5"))
        fields.append(HTTPField(name: .age, value: "50"))
        fields.append(HTTPField(name: .vary, value: "Accept"))
        fields.append(HTTPField(name: .cacheControl, value: "must-revalidate"))
        fields.append(HTTPField(name: .vary, value: "accept-language, Accept"))
        let facts = StoredResponseFacts(status: 200, fields: fields, requestTime: now, responseTime: now)
        #expect(facts.control.maxAge == .seconds(60))
        #expect(facts.control.mustRevalidate)
        #expect(facts.entityTag == "\"a\"")
        #expect(facts.lifetime == .seconds(60))
        // Date 20 s before arrival; the first Age line (5) counts, not the second.
        #expect(facts.initialAge == .seconds(20))
        #expect(facts.varyNames == [HTTPField.Name.accept, .acceptLanguage])
        var reordered = HTTPFields()
        for field in fields.reversed() { reordered.append(field) }
        reordered.append(HTTPField(name: .server, value: "x"))
        let again = StoredResponseFacts(status: 200, fields: reordered, requestTime: now, responseTime: now)
        #expect(again.control.maxAge == .seconds(60) && again.control.mustRevalidate)
        #expect(again.initialAge == .seconds(50))  // now the line with 50 comes first
        #expect(again.varyNames == [HTTPField.Name.acceptLanguage, .accept])
        // Two ETag lines read as one value joined, as HTTPFields' subscript joins them.
        var twoTags = HTTPFields()
        twoTags.append(HTTPField(name: .eTag, value: "\"a\""))
        twoTags.append(HTTPField(name: .eTag, value: "\"b\""))
        #expect(StoredResponseFacts(status: 200, fields: twoTags, requestTime: now, responseTime: now).entityTag == twoTags[.eTag])
        // Pragma counts only without Cache-Control.
        var pragma = HTTPFields()
        pragma.append(HTTPField(name: .pragma, value: "No-Cache"))
        #expect(CacheControl(pragma).noCache)
        pragma.append(HTTPField(name: .cacheControl, value: "max-age=5"))
        #expect(!CacheControl(pragma).noCache)
    }
}
