import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTesting
import Foundation
import Testing

/// A POST brick with a text body, for queue tests.
final class RecordSale: Component, POSTRequestType {
    let urlString: String
    let amount: Int
    var headers: [String: String] { extraHeaders }
    let extraHeaders: [String: String]
    init(_ url: String, amount: Int, headers: [String: String] = [:]) {
        self.urlString = url
        self.amount = amount
        self.extraHeaders = headers
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: amount, name: "amount"))
        super.init(parameterBuilder: parameters)
    }
}

/// A temporary directory removed at the end of `body`.
func withDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let path = NSTemporaryDirectory() + "brick-offline-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(URL(fileURLWithPath: path))
}

/// A session whose delays run on `clock` and whose reachability is `reachability`.
func session(clock: ManualClock = ManualClock(), reachability: ManualReachability = ManualReachability()) -> Session {
    Session(reachability: reachability, clock: clock)
}

/// A TCP port on loopback with nothing listening (connections are refused).
func closedPort() -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(descriptor, pointer, length) == 0 ? getsockname(descriptor, pointer, &length) : -1
        }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

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
