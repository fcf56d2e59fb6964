// brick-demo: BrickRequest end to end.
//   swift run brick-demo                     # against BrickTestServer, started in this process on 127.0.0.1
//   swift run brick-demo --base-url URL      # against another httpbin-like server
import BrickOffline
import BrickRequest
import BrickTestServer
import Foundation
import Synchronization

// MARK: - The README example, unchanged

protocol APISessionRequestType: SessionRequestType {}
extension APISessionRequestType { var session: Session { Session.api } }  // user-defined brick

final class GetUser: Component, GETRequestType, APISessionRequestType, SoftAutoRetryType, JSONResponseType {
    let userID: String
    var urlString: String { "https://api.example.com/users" }
    init(userID: String) {
        self.userID = userID
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: userID, name: "userID"))
        super.init(parameterBuilder: parameters)
    }
}

extension Session {
    /// The demo's API session: every request goes to the demo server, whatever its URL's host.
    static let api = Session(
        configuration: .init(
            defaultHeaders: ["Accept": "application/json"],
            originOverride: DemoServer.baseURL
        )
    )
}

// MARK: - More endpoints

/// A multipart upload: text, a number and a file streamed from disk.
final class UploadAvatar: Component, POSTRequestType, APISessionRequestType, ValidatedResponseType, JSONResponseType {
    var urlString: String { "https://api.example.com/post" }
    init(userID: String, image: URL) {
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: userID, name: "userID"))
        parameters.add(TextParameter(value: 2, name: "version"))
        parameters.add(FileParameter(fileURL: image, name: "avatar", mimeType: "image/png"))
        super.init(parameterBuilder: parameters)
    }
}

struct Order: Decodable, Sendable {
    let id: Int
    let items: [String]
    let total: Double
}

/// A Decodable endpoint.
final class GetOrder: Component, GETRequestType, APISessionRequestType, ValidatedResponseType, DecodableResponseType {
    typealias Model = Order
    let id: Int
    var urlString: String { "https://api.example.com/orders/\(id)" }
    init(id: Int) {
        self.id = id
        super.init()
    }
}

/// An endpoint whose server answers 404: validation turns it into an error that keeps the status.
final class GetMissing: Component, GETRequestType, APISessionRequestType, ValidatedResponseType, DataResponseType {
    var urlString: String { "https://api.example.com/status/404" }
}

/// A large download written to a file, retried quickly; a retry continues a cut-off body.
final class DownloadBackup: Component, GETRequestType, APISessionRequestType, ValidatedResponseType,
    DownloadResponseType
{
    let downloadDestination: URL
    var urlString: String { "https://api.example.com/range/300000" }
    var autoRetryConfiguration: AutoRetryConfiguration { AutoRetryConfiguration(breakTime: .milliseconds(200)) }
    init(to file: URL) {
        downloadDestination = file
        super.init()
    }
}

/// A stream of server-sent events.
final class Ticks: Component, GETRequestType, APISessionRequestType, ValidatedResponseType, NonAutoRetryType,
    EventStreamResponseType
{
    var urlString: String { "https://api.example.com/sse/3" }
    var headers: [String: String] { ["Accept": "text/event-stream"] }
}

/// A sale the server must learn about eventually, even if it is down now (the offline queue).
final class RecordSale: Component, POSTRequestType {
    let origin: String
    var urlString: String { origin + "/anything/sales" }
    init(origin: String, amount: Int) {
        self.origin = origin
        var parameters = ParameterBuilder()
        parameters.add(TextParameter(value: amount, name: "amount"))
        super.init(parameterBuilder: parameters)
    }
}

// MARK: - The demo server

enum DemoServer {
    /// `--base-url URL`, when given.
    static let remoteBaseURL: String? = {
        let arguments = CommandLine.arguments
        guard let index = arguments.firstIndex(of: "--base-url"), arguments.count > index + 1 else { return nil }
        return arguments[index + 1]
    }()

    /// The loopback server, started on first use unless `--base-url` names another.
    static let local: BrickTestServer? = {
        guard remoteBaseURL == nil else { return nil }
        do {
            let server = try BrickTestServer.start()
            server.route("/users") { request in
                let id = request.uri.components(separatedBy: "userID=").last ?? "?"
                return .ok(#"{"id":"\#(id)","name":"Brick User \#(id)"}"#, contentType: "application/json")
            }
            server.route("/orders/7") { _ in
                .ok(#"{"id":7,"items":["2x4 brick","mortar"],"total":12.5}"#, contentType: "application/json")
            }
            print("BrickTestServer listening on \(server.baseURL)")
            return server
        } catch {
            print("cannot start the loopback server: \(error)")
            exit(1)
        }
    }()

    /// `--base-url`, or the loopback server's.
    static var baseURL: String { remoteBaseURL ?? local?.baseURL ?? "" }
}

// MARK: - Run

/// A timeline that is still shown when the network is gone: the server's when it answers, the
/// stored one when it cannot be reached.
final class GetTimeline: Component, GETRequestType, SoftAutoRetryType, CachedResponseType, StringResponseType {
    let urlString: String
    let session: Session
    var cachePolicy: CachePolicy { .networkElseCache }
    init(url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

@main
struct BrickDemo {
    static func main() async {
        _ = DemoServer.baseURL
        var ok = true

        // 1. The README example with a handler.
        let first = await withCheckedContinuation {
            (continuation: CheckedContinuation<Response<JSON, BrickError>, Never>) in
            GetUser(userID: "100").response { response in continuation.resume(returning: response) }.resume()
        }
        ok = report("GetUser(userID: \"100\") via response(_:)", first.result.map { $0["name"].string ?? "?" }) && ok

        // 2. The async form.
        do {
            let user = try await GetUser(userID: "101").value
            print("✔ GetUser(userID: \"101\").value: \(user["name"].string ?? "?")")
        } catch {
            print("✘ GetUser(userID: \"101\").value: \(error)")
            ok = false
        }

        // 3. A multipart upload of a file streamed from disk.
        let image = URL(fileURLWithPath: NSTemporaryDirectory() + "brick-demo-avatar.png")
        try? Data(
            base64Encoded:
                "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
        )!
        .write(to: image)
        let upload = await UploadAvatar(userID: "100", image: image).response()
        ok =
            report(
                "multipart upload",
                upload.result.map { echo in
                    "server got fields \(echo["form"].object?.keys.sorted() ?? []) and a \(echo["files"]["avatar"]["size"].int ?? 0)-byte \(echo["files"]["avatar"]["content_type"].string ?? "?") file"
                }
            ) && ok

        // 4. A Decodable endpoint.
        let order = await GetOrder(id: 7).response()
        ok =
            report(
                "GetOrder(id: 7) decoded",
                order.result.map { "order \($0.id): \($0.items.joined(separator: ", ")), total \($0.total)" }
            ) && ok

        // 5. A validation failure.
        let missing = await GetMissing().response()
        if let error = missing.error, error.code == .unacceptableStatusCode {
            print("✔ validation failure, as expected: \(error)")
        } else {
            print("✘ GetMissing should have failed validation")
            ok = false
        }

        // 6. A download to a file with progress; on the loopback server the first attempt is cut
        //    off after 100 kB, and the retry asks only for the rest.
        DemoServer.local?.script("/range/300000", [.routeCutAfter(bodyBytes: 100_000)])
        let file = URL(fileURLWithPath: NSTemporaryDirectory() + "brick-demo-backup.bin")
        let reports = Reports()
        let backup = await DownloadBackup(to: file).progress { reports.add($0.bytesReceived) }.response()
        ok =
            report(
                "download with progress",
                backup.result.map { url in
                    let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0
                    return "\(size) bytes in \(url.lastPathComponent) after \(backup.retryCount) retry, "
                        + "status \(backup.status?.code ?? 0), \(reports.count) progress reports"
                }
            ) && ok

        // 7. Server-sent events, as they arrive (the loopback server's /sse route).
        if DemoServer.local != nil {
            do {
                var events: [String] = []
                for try await event in Ticks().events() {
                    events.append(event.data.replacingOccurrences(of: "\n", with: " / "))
                }
                print("✔ server-sent events: \(events)")
            } catch {
                print("✘ server-sent events: \(error)")
                ok = false
            }
        }

        // 8. Offline delivery: sales recorded while the server is down are kept on disk and
        //    delivered, in order, once it is back.
        if DemoServer.local != nil { ok = await offlineDelivery() && ok }

        // 9. Offline reads: a timeline read online is stored on disk; with its server stopped it is
        //    read again from the cache.
        if DemoServer.local != nil { ok = await offlineReads() && ok }

        // 10. What the session would send, as a curl command.
        print("  curl equivalent of GetUser: \(Session.api.cURLDescription(for: GetUser(userID: "100")).prefix(110))…")
        exit(ok ? 0 : 1)
    }

    /// Queues three sales for a server that is down, starts it, and shows them delivered.
    static func offlineDelivery() async -> Bool {
        do {
            // A port with no server behind it, for now.
            let outage = try await BrickTestServer.start()
            let port = outage.port
            await outage.shutdown()
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "brick-demo-offline-\(getpid())")
            defer { try? FileManager.default.removeItem(at: directory) }
            let queue = try PersistentRequestQueue(
                name: "sales",
                directory: directory,
                session: Session(),
                retryInterval: .milliseconds(200)
            )
            for amount in [12, 7, 30] {
                try await queue.add(RecordSale(origin: "http://127.0.0.1:\(port)", amount: amount))
            }
            try await Task.sleep(for: .milliseconds(300))
            let waiting = await queue.count
            let server = try await BrickTestServer.start(port: port)
            queue.retryPausedEntriesNow()
            await queue.waitUntilEmpty()
            await server.shutdown()
            let delivered = server.requests(path: "/anything/sales").map { String(decoding: $0.body, as: UTF8.self) }
            let keys = Set(server.requests(path: "/anything/sales").compactMap { $0.header("Idempotency-Key") })
            print(
                "✔ offline queue: \(waiting) sales waited on disk while the server was down, then arrived in order "
                    + "\(delivered) with \(keys.count) distinct Idempotency-Keys"
            )
            return delivered == ["amount=12", "amount=7", "amount=30"]
        } catch {
            print("✘ offline queue: \(error)")
            return false
        }
    }

    /// Reads a timeline with `.networkElseCache`, stops its server, and reads it again: the stored
    /// response, flagged stale, from a cache on disk.
    static func offlineReads() async -> Bool {
        do {
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "brick-demo-cache-\(getpid())")
            defer { try? FileManager.default.removeItem(at: directory) }
            let cache = try SQLiteResponseCache(name: "timeline", directory: directory)
            let session = Session(configuration: .init(responseCache: cache))
            let server = try await BrickTestServer.start()
            let url = server.baseURL + "/cache/timeline?lm=0"
            let online = await GetTimeline(url: url, session: session).response()
            await server.shutdown()
            let offline = await GetTimeline(url: url, session: session).response()
            guard online.source == .network, offline.source == .cache, offline.isStale, offline.data == online.data,
                let body = offline.value
            else {
                print("✘ offline reads: online \(online.source) \(online.error.map { "\($0)" } ?? ""), offline \(offline.source) \(offline.error.map { "\($0)" } ?? "")")
                return false
            }
            print(
                "✔ offline reads: with the server stopped, the timeline came from the cache on disk "
                    + "(\(body.utf8.count) bytes, stale, age \(offline.age.map { "\($0.components.seconds) s" } ?? "?"))"
            )
            return true
        } catch {
            print("✘ offline reads: \(error)")
            return false
        }
    }

    /// Counts progress reports (they arrive on the session's callback queue).
    final class Reports: Sendable {
        private let counter = Mutex(0)
        func add(_ bytes: Int64) { counter.withLock { $0 += 1 } }
        var count: Int { counter.withLock { $0 } }
    }

    static func report<T>(_ title: String, _ result: Result<T, BrickError>) -> Bool {
        switch result {
        case .success(let value):
            print("✔ \(title): \(value)")
            return true
        case .failure(let error):
            print("✘ \(title): \(error)")
            return false
        }
    }
}
