import BrickRequest
import Foundation
import Testing

@Suite("JSON: the parser (RFC 8259) and compact output", .timeLimit(.minutes(2)))
struct JSONParserTests {
    private func parse(_ text: String) throws(JSONParsingError) -> JSON {
        try JSON(data: Data(text.utf8))
    }

    private func failure(_ text: String) -> JSONParsingError? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test("every kind of value, nested, with whitespace around tokens")
    func values() throws {
        let json = try parse(
            #" { "s" : "text", "n": -12.5e1, "i": 42, "t": true, "f": false, "z": null, "a": [ 1, [ ], { } ] } "#
        )
        #expect(json["s"].string == "text")
        #expect(json["n"].double == -125)
        #expect(json["i"].int == 42)
        #expect(json["t"].bool == true)
        #expect(json["f"].bool == false)
        #expect(json["z"].isNull)
        #expect(json["a"][0].int == 1)
        #expect(json["a"][1].array == [])
        #expect(json["a"][2].object == [:])
        #expect(json["missing"]["deeper"][3].isNull)
        #expect(try parse("\"top\"") == .string("top"))
        #expect(try parse(" 0 ") == .number(0))
        #expect(try parse("null") == .null)
        #expect(try parse(#"{"k": 1, "k": 2}"#)["k"].int == 2)  // the last duplicate wins
    }

    @Test("numbers follow the grammar exactly")
    func numbers() throws {
        for (text, value) in [
            ("0", 0.0), ("-0", -0.0), ("10", 10), ("1.5", 1.5), ("-0.25", -0.25), ("1e3", 1000), ("1E+2", 100),
            ("25e-2", 0.25), ("9007199254740993", 9_007_199_254_740_992),
        ] {
            #expect(try parse(text) == .number(value), "\(text)")
        }
        for text in ["01", "-", "+1", "1.", ".5", "1e", "1e+", "0x10", "NaN", "Infinity", "1e400", "- 1"] {
            #expect(failure(text) != nil, "\(text)")
        }
        #expect(failure("[-01]") == JSONParsingError(offset: 3, reason: "a number cannot have a leading zero"))
        #expect(failure("1e400") == JSONParsingError(offset: 0, reason: "a number out of the range of a double"))
    }

    @Test("strings: escapes, surrogate pairs, UTF-8; control characters and bad escapes refused")
    func strings() throws {
        #expect(try parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{08}\u{0C}\n\r\t"))
        #expect(try parse(#""\u00e9\u4E2D""#) == .string("é中"))
        #expect(try parse(#""\ud83d\ude00 ok""#) == .string("😀 ok"))
        #expect(try parse("\"raw é 😀\"") == .string("raw é 😀"))
        #expect(failure(#""\ud83d""#)?.reason == "a high surrogate without its low surrogate")
        #expect(failure(#""\ud83d\u0041""#)?.reason == "a high surrogate without its low surrogate")
        #expect(failure(#""\ude00""#)?.reason == "a low surrogate without its high surrogate")
        #expect(failure(#""\x41""#)?.reason == "an invalid escape sequence")
        #expect(failure(#""\u12G4""#)?.reason == "a \\u escape needs four hex digits")
        #expect(failure("\"tab\there\"")?.reason == "a control character in a string must be escaped")
        #expect(failure("\"open") != nil)
        // Invalid UTF-8 (a lone continuation byte, an overlong encoding), with and without escapes.
        for bytes: [UInt8] in [[0x22, 0x80, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0x5C, 0x6E, 0xFF, 0x22]] {
            #expect(throws: JSONParsingError.self) { try JSON(data: Data(bytes)) }
        }
    }

    @Test("malformed documents fail with the offset of the problem")
    func malformed() {
        #expect(failure("") == JSONParsingError(offset: 0, reason: "unexpected end of input"))
        #expect(failure("{not json")?.offset == 1)
        #expect(failure("[1, 2,]")?.offset == 6)
        #expect(failure("[1 2]")?.reason == "expected ',' or ']' in an array")
        #expect(failure(#"{"a" 1}"#)?.reason == "expected ':' after an object key")
        #expect(failure(#"{"a": 1,}"#)?.reason == "expected a string key in an object")
        #expect(failure("{1: 2}")?.reason == "expected a string key in an object")
        #expect(failure("tru")?.reason == "unexpected end of input")
        #expect(failure("trux")?.reason == "invalid literal")
        #expect(failure("nul")?.reason == "unexpected end of input")
        #expect(failure("[] []")?.reason == "unexpected content after the value")
        #expect(failure("// comment\n1") != nil)
        #expect(failure("[1, 2")?.reason == "unexpected end of input in an array")
        #expect("\(JSONParsingError(offset: 3, reason: "x"))" == "invalid JSON at byte 3: x")
    }

    @Test("nesting is limited instead of overflowing the stack")
    func depth() throws {
        let limit = 512
        let deepest = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        var json = try parse(deepest)
        for _ in 0..<(limit - 1) { json = json[0].array == nil ? json : json[0] }
        #expect(json.array == [])
        let tooDeep = String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1)
        #expect(failure(tooDeep)?.reason == "nested deeper than 512 levels")
        #expect(failure(String(repeating: "{\"a\":", count: 100_000)) != nil)
    }

    @Test("compact output escapes what it must and parses back to the same value")
    func description() throws {
        let value = JSON.object([
            "quote\"back\\slash": .string("line\nfeed\ttab\u{01}bell\u{7F}é/"),
            "n": .array([.number(1), .number(-2.5), .bool(true), .null]),
        ])
        let text = value.description
        #expect(text == #"{"n":[1,-2.5,true,null],"quote\"back\\slash":"line\nfeed\ttab\u0001bell"# + "\u{7F}é/\"}")
        #expect(try parse(text) == value)
    }
}
