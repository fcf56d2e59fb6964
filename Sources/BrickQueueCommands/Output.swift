import BrickQueueConsole
import Foundation

/// How the commands print.
enum Output {
    /// One JSON object on a line of its own (sorted keys: a stable order for people and diffs).
    static func line(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return
        }
        print(String(decoding: data, as: UTF8.self))
    }

    /// Columns padded to their widest cell.
    static func table(_ header: [String], _ rows: [[String]]) {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        for row in all {
            let cells = row.indices.map { column in
                column == row.count - 1 ? row[column] : row[column].padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }
            print(cells.joined(separator: "  "))
        }
    }

    static func date(_ date: Date) -> String { Format.date(date) }
    static func age(_ seconds: Double) -> String { Format.age(seconds) }
    static func seconds(_ text: String) -> Double? { Format.seconds(text) }
}
