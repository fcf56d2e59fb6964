// brick-demo: starts BrickTestServer on 127.0.0.1 and shows BrickRequest working against it.
//   swift run brick-demo                     # against the embedded loopback server
//   swift run brick-demo --base-url URL      # against another httpbin-like server
import BrickRequest
import BrickTestServer
import Foundation

@main
struct BrickDemo {
    static func main() async {
        let arguments = CommandLine.arguments
        var baseURL: String? = nil
        if let index = arguments.firstIndex(of: "--base-url"), arguments.count > index + 1 {
            baseURL = arguments[index + 1]
        }
        var server: BrickTestServer? = nil
        if baseURL == nil {
            do {
                let started = try await BrickTestServer.start()
                server = started
                baseURL = started.baseURL
                print("BrickTestServer listening on \(started.baseURL)")
            } catch {
                print("cannot start the loopback server: \(error)")
                exit(1)
            }
        }
        let ok = await TransportDemo(baseURL: baseURL!).run()
        await server?.shutdown()
        exit(ok ? 0 : 1)
    }
}

struct TransportDemo {
    let baseURL: String
    let transport = CurlTransport()

    func run() async -> Bool {
        var ok = true
        ok = await step("GET with a query") {
            let response = try await transport.send(try TransportRequest(method: .get, url: baseURL + "/anything?userID=100"))
            return "\(response.status.code), \(response.body?.count ?? 0) bytes, HTTP \(response.metrics.httpVersion)"
        } && ok
        ok = await step("POST a JSON body") {
            let request = try TransportRequest(
                method: .post, url: baseURL + "/post", headers: [("Content-Type", "application/json")],
                body: .data(Data(#"{"name":"brick"}"#.utf8)))
            let response = try await transport.send(request)
            return "\(response.status.code); replay with: \(transport.cURLDescription(for: request).prefix(80))…"
        } && ok
        ok = await step("gzip, decoded") {
            let response = try await transport.send(try TransportRequest(method: .get, url: baseURL + "/gzip"))
            return "\(response.status.code), \(response.body?.count ?? 0) decoded bytes"
        } && ok
        ok = await step("three redirects") {
            let response = try await transport.send(try TransportRequest(method: .get, url: baseURL + "/redirect/3"))
            return "\(response.status.code) after \(response.metrics.redirectCount) redirects"
        } && ok
        _ = await step("header injection is refused before any I/O", expectFailure: true) {
            _ = try TransportRequest(method: .get, url: baseURL + "/get", headers: [("X-Evil", "a\r\nInjected: 1")])
            return "sent?!"
        }
        return ok
    }

    private func step(
        _ title: String, expectFailure: Bool = false, _ body: () async throws -> String
    ) async -> Bool {
        do {
            let summary = try await body()
            print("✔ \(title): \(summary)")
            return !expectFailure
        } catch {
            print(expectFailure ? "✔ \(title): \(error)" : "✘ \(title): \(error)")
            return expectFailure
        }
    }
}
