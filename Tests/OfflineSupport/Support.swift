import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTesting
import Foundation
import Testing

/// A POST brick with a text body, for queue tests.
package final class RecordSale: Component, POSTRequestType {
    package let urlString: String
    package let amount: Int
    package var headers: [String: String] { extraHeaders }
    package let extraHeaders: [String: String]
    package init(_ url: String, amount: Int, headers: [String: String] = [:]) {
        self.urlString = url
        self.amount = amount
        self.extraHeaders = headers
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: amount, name: "amount"))
        super.init(parameterBuilder: parameters)
    }
}

/// A temporary directory removed at the end of `body`.
package func withDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let path = NSTemporaryDirectory() + "brick-offline-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(URL(fileURLWithPath: path))
}

/// A session whose delays run on `clock` and whose reachability is `reachability`.
package func session(clock: ManualClock = ManualClock(), reachability: ManualReachability = ManualReachability()) -> Session {
    Session(reachability: reachability, clock: clock)
}

/// A TCP port on loopback with nothing listening (connections are refused).
package func closedPort() -> Int {
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

/// A POST brick with limits of its own: a timeout and a largest response.
package final class LimitedPost: Component, POSTRequestType {
    package let urlString: String
    package let timeout: Duration?
    package let maxResponseSize: Int64?
    package init(_ url: String, timeout: Duration? = nil, maxResponseSize: Int64? = nil) {
        self.urlString = url
        self.timeout = timeout
        self.maxResponseSize = maxResponseSize
        super.init()
    }
}

/// The directory of the test products: the probes the tests start are built beside the tests.
package var testProductsDirectory: URL {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    let executable = String(decoding: buffer[0..<max(length, 0)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return URL(fileURLWithPath: executable).deletingLastPathComponent()
}
