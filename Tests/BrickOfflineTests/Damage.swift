import BrickOfflineTestSupport
import Foundation
import Testing
/// How a damage test spoils one column of a stored row.
enum Damage: String, CaseIterable, Sendable {
    case wrongType, null, invalidUTF8

    /// The SQL value that damages a column of `kind` (`text`, `blob`, `integer`, `real`) this way.
    func sql(forColumnOf kind: String) -> String {
        switch self {
        case .null: return "NULL"
        case .invalidUTF8: return "CAST(x'C328FFFE' AS TEXT)"
        case .wrongType:
            switch kind {
            case "text": return "x'00FF10'"  // a blob: TEXT affinity would turn a number into text
            case "blob": return "42"
            default: return "'not a number'"
            }
        }
    }
}
