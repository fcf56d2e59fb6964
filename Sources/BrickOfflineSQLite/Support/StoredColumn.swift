import BrickOfflineCore
import Foundation
import GRDB

/// A row that does not hold what its table promises, and why (a damaged or foreign database file).
struct DamagedRow: Error {
    var reason: String
}

/// One column of a stored row, read as whatever SQLite holds — never converted by force, so that
/// a wrongly typed value, a NULL or text that is not UTF-8 becomes a ``DamagedRow`` instead of a
/// trap. (GRDB's typed subscripts stop the process on a value of another type.)
struct StoredColumn {
    let name: String
    let value: (any DatabaseValueConvertible)?

    init(_ row: Row, _ name: String) {
        self.name = name
        value = row[name]
    }

    init(name: String, value: (any DatabaseValueConvertible)?) {
        self.name = name
        self.value = value
    }

    private var kind: String {
        switch value {
        case nil: return "NULL"
        case is Int64: return "an integer"
        case is Double: return "a real number"
        case is String: return "text"
        default: return "a blob"
        }
    }

    private func damaged(_ expected: String) -> DamagedRow {
        DamagedRow(reason: "damaged row: \(name) holds \(kind), not \(expected)")
    }

    func text() throws(DamagedRow) -> String {
        guard let text = value as? String else { throw damaged("text") }
        return text
    }

    func optionalText() throws(DamagedRow) -> String? {
        value == nil ? nil : try text()
    }

    func number() throws(DamagedRow) -> Double {
        if let number = value as? Double, number.isFinite { return number }
        if let number = value as? Int64 { return Double(number) }
        throw damaged("a number")
    }

    func optionalNumber() throws(DamagedRow) -> Double? {
        value == nil ? nil : try number()
    }

    func integer() throws(DamagedRow) -> Int64 {
        if let integer = value as? Int64 { return integer }
        if let number = value as? Double, number.rounded() == number, abs(number) < 9e15 { return Int64(number) }
        throw damaged("an integer")
    }

    func optionalInteger() throws(DamagedRow) -> Int64? {
        value == nil ? nil : try integer()
    }

    func bytes() throws(DamagedRow) -> Data {
        if let data = value as? Data { return data }
        // SQLite hands back an empty blob as a zero-length value of either type.
        if let text = value as? String, text.isEmpty { return Data() }
        throw damaged("a blob")
    }

    func optionalBytes() throws(DamagedRow) -> Data? {
        value == nil ? nil : try bytes()
    }

    func uuid() throws(DamagedRow) -> UUID {
        let text = try text()
        guard let uuid = UUID(uuidString: text), uuid.uuidString == text else {
            throw DamagedRow(reason: "damaged row: id \(text.prefix(40).debugDescription) is not an upper-case UUID")
        }
        return uuid
    }

    func date() throws(DamagedRow) -> Date { Date(timeIntervalSince1970: try number()) }

    func optionalDate() throws(DamagedRow) -> Date? { try optionalNumber().map { Date(timeIntervalSince1970: $0) } }
}
