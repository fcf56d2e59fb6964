@_spi(Tuning) @_spi(TransportImplementation) import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

@Suite("CurlTransport: connections, redirects, scale", .timeLimit(.minutes(2)))
struct CurlTransportConnectionTests {
    @Test("sequential requests reuse one keep-alive connection and one easy handle")
    func keepAlive() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            for _ in 0..<20 {
                let response = try await transport.send(try get(server.baseURL + "/bytes/10"))
                #expect(response.status == .ok)
            }
            #expect(server.connectionCount == 1)
            #expect(transport.easyHandleCount == 1)
        }
    }

    @Test("after a network change, connections opened before it are not reused")
    func networkChange() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let request = try get(server.baseURL + "/bytes/10")
            _ = try await transport.send(request)
            _ = try await transport.send(request)
            #expect(server.connectionCount == 1)
            transport.networkDidChange()
            // Within 2 s of the change every transfer opens a new connection.
            _ = try await transport.send(request)
            #expect(server.connectionCount == 2)
            // Later, only connections older than the change are refused: a new one, then reuse.
            // (Waits well past the 2 s window, which starts when the driver handles the change: a
            // loaded machine may handle it late.)
            try await Task.sleep(for: .seconds(3))
            transport.networkDidChange()
            try await Task.sleep(for: .seconds(3))
            _ = try await transport.send(request)
            #expect(server.connectionCount == 3)
            _ = try await transport.send(request)
            _ = try await transport.send(request)
            #expect(server.connectionCount == 3)
        }
    }

    @Test("a session forwards its reachability monitor's changes to the transport")
    func sessionForwardsNetworkChanges() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let reachability = ManualReachability()
            let session = Session(transport: transport, reachability: reachability)
            let url = server.baseURL + "/anything"
            _ = try await ExecutorEcho(url: url, session: session).value
            _ = try await ExecutorEcho(url: url, session: session).value
            #expect(server.connectionCount == 1)
            reachability.set(.reachable)  // any change event
            for _ in 0..<500 where server.connectionCount == 1 {
                _ = try await ExecutorEcho(url: url, session: session).value
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(server.connectionCount == 2)
        }
    }

    @Test("connection limits per host are honoured")
    func perHostLimit() async throws {
        try await withServer { server in
            let transport = curlTransport { $0.maxConnectionsPerHost = 2 }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<10 {
                    let request = try get(server.baseURL + "/delay/0.1")
                    group.addTask { _ = try await transport.send(request) }
                }
                try await group.waitForAll()
            }
            #expect(server.connectionCount == 2)
            #expect(server.requestCount == 10)
        }
    }

    @Test("total connection limit is honoured")
    func totalLimit() async throws {
        try await withServer { server in
            let transport = curlTransport { $0.maxConnections = 3 }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<12 {
                    let request = try get(server.baseURL + "/delay/0.1")
                    group.addTask { _ = try await transport.send(request) }
                }
                try await group.waitForAll()
            }
            #expect(server.connectionCount == 3)
        }
    }

    @Test("a POST without an idempotency key never rides a reused connection")
    func freshConnectForPOST() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            _ = try await transport.send(try get(server.baseURL + "/get"))
            // The server reads the POST and closes without answering. On a reused connection
            // libcurl 7.88 would silently send it again; on a fresh one it reports the failure.
            server.script("/orders", [.closeBeforeResponse, .ok("second")])
            let result = await transport.result(
                try TransportRequest(method: .post, url: server.baseURL + "/orders", body: .data(Data("buy".utf8)))
            )
            #expect(result.failure?.kind == .connectionReset)
            #expect(result.failure?.requestBytesSent == true)
            let posts = server.requests(path: "/orders")
            #expect(posts.count == 1)
            #expect(posts.first?.indexOnConnection == 1)
            #expect(posts.first?.connection == 2)
        }
    }

    @Test("a POST with an Idempotency-Key may reuse the connection")
    func keyedPOSTReuses() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            _ = try await transport.send(try get(server.baseURL + "/get"))
            let response = try await transport.send(
                try TransportRequest(
                    method: .post,
                    url: server.baseURL + "/post",
                    headers: [("Idempotency-Key", "k-1")],
                    body: .data(Data("buy".utf8))
                )
            )
            #expect(response.metrics.connectionReused)
            #expect(server.connectionCount == 1)
        }
    }

    @Test("redirects are followed up to the limit")
    func redirects() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let response = try await transport.send(try get(server.baseURL + "/redirect/3"))
            #expect(response.status == .ok)
            #expect(response.metrics.redirectCount == 3)
            #expect(response.url == server.baseURL + "/get")
            let tooMany = await transport.result(try get(server.baseURL + "/redirect/11"))
            #expect(tooMany.failure?.kind == .tooManyRedirects)
            #expect(server.requests(path: "/get").count == 1)  // the 11-hop chain stopped before reaching /get
            let notFollowed = try await transport.send(
                try get(server.baseURL + "/redirect/1", options: .init(followsRedirects: false))
            )
            #expect(notFollowed.status == .found)
            #expect(notFollowed.headerFields[.location] == "/get")
        }
    }

    @Test("redirects to other schemes are refused")
    func redirectScheme() async throws {
        try await withServer { server in
            let result = await CurlTransport().result(try get(server.baseURL + "/redirect-to?url=file:///etc/passwd"))
            #expect(result.failure?.kind == .redirectRefused)
        }
    }

    @Test("303 turns a POST into a GET without a body; 307 keeps both")
    func redirectMethods() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let see = try await transport.send(
                try TransportRequest(
                    method: .post,
                    url: server.baseURL + "/redirect-to?url=/anything&status_code=303",
                    headers: [("Content-Type", "text/plain")],
                    body: .data(Data("payload".utf8))
                )
            )
            #expect(try json(see.body)["method"] as? String == "GET")
            #expect(server.requests(path: "/anything").last?.body == [])
            let temporary = try await transport.send(
                try TransportRequest(
                    method: .post,
                    url: server.baseURL + "/redirect-to?url=/anything&status_code=307",
                    headers: [("Content-Type", "text/plain")],
                    body: .data(Data("payload".utf8))
                )
            )
            #expect(try json(temporary.body)["method"] as? String == "POST")
            #expect(server.requests(path: "/anything").last?.body == Array("payload".utf8))
        }
    }

    @Test("credentials are dropped when a redirect changes origin, and kept on the same origin")
    func redirectCredentials() async throws {
        try await withServer { server in
            try await withServer { other in
                let transport = CurlTransport()
                let secrets: [(name: String, value: String)] = [
                    ("Authorization", "Bearer s3cret"), ("Cookie", "session=abc"),
                    ("Proxy-Authorization", "Basic eA=="),
                    ("X-Keep", "yes"),
                ]
                // Same origin: kept.
                _ = try await transport.send(
                    try get(server.baseURL + "/redirect-to?url=/anything/same", headers: secrets)
                )
                let same = try #require(server.requests(path: "/anything/same").last)
                #expect(same.header("Authorization") == "Bearer s3cret")
                #expect(same.header("Cookie") == "session=abc")
                // Another port: dropped, and stays dropped when the chain comes back.
                let back = (server.baseURL + "/anything/back").addingPercentEncoding(
                    withAllowedCharacters: .alphanumerics
                )!
                let hop = (other.baseURL + "/redirect-to?url=\(back)").addingPercentEncoding(
                    withAllowedCharacters: .alphanumerics
                )!
                _ = try await transport.send(try get(server.baseURL + "/redirect-to?url=\(hop)", headers: secrets))
                let crossed = try #require(other.requests(path: "/redirect-to").last)
                #expect(crossed.header("Authorization") == nil)
                #expect(crossed.header("Cookie") == nil)
                #expect(crossed.header("Proxy-Authorization") == nil)
                #expect(crossed.header("X-Keep") == "yes")
                let returned = try #require(server.requests(path: "/anything/back").last)
                #expect(returned.header("Authorization") == nil)
                #expect(returned.header("Cookie") == nil)
            }
        }
    }

    @Test("a session's sensitiveHeaders (an X-Api-Key) are dropped with the credentials when a redirect changes origin, kept on the same origin")
    func redirectSensitiveHeaders() async throws {
        try await withServer { server in
            try await withServer { other in
                let session = Session(configuration: .init(sensitiveHeaders: ["X-Api-Key"]))
                let headers = [("X-Api-Key", "k3y"), ("X-Keep", "yes")]
                _ = try await session.transport.send(try get(server.baseURL + "/redirect-to?url=/anything/same-key", headers: headers))
                #expect(server.requests(path: "/anything/same-key").last?.header("X-Api-Key") == "k3y")
                let hop = (other.baseURL + "/anything/crossed-key").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                _ = try await session.transport.send(try get(server.baseURL + "/redirect-to?url=\(hop)", headers: headers))
                let crossed = try #require(other.requests(path: "/anything/crossed-key").last)
                #expect(crossed.header("X-Api-Key") == nil)
                #expect(crossed.header("X-Keep") == "yes")
                // A transport of its own, named in its redirect policy, does the same.
                var configuration = CurlTransport.Configuration()
                configuration.redirects.sensitiveHeaders = ["x-api-key"]
                _ = try await CurlTransport(configuration: configuration).send(
                    try get(server.baseURL + "/redirect-to?url=\(hop)", headers: headers)
                )
                #expect(other.requests(path: "/anything/crossed-key").last?.header("X-Api-Key") == nil)
            }
        }
    }

    @Test(
        "a follow-up started from another thread right after each completion is never lost",
        arguments: [Duration.zero, .microseconds(50), .milliseconds(20)]
    )
    func handOffChain(spin: Duration) async throws {
        try await withServer { server in
            let transport = curlTransport { $0.handOffSpin = spin }
            let request = try get(server.baseURL + "/bytes/16")
            let handOff = DispatchQueue(label: "hand-off")
            let results = ResultsBox()
            // Each completion hands off to another thread, which starts the next request: the
            // driver is then either spinning (it must notice) or asleep in poll (it must be woken).
            @Sendable func chain(_ remaining: Int) {
                _ = transport.start(request) { result in
                    results.add(result)
                    guard remaining > 1 else { return }
                    handOff.async { chain(remaining - 1) }
                }
            }
            chain(200)
            await results.wait(count: 200)
            #expect(results.all.allSatisfy { (try? $0.get())?.status == .ok })
            #expect(server.requestCount == 200)
            #expect(server.connectionCount == 1)
        }
    }

    @Test("1,000 concurrent GETs all succeed with correct bodies")
    func thousandConcurrent() async throws {
        try await withServer { server in
            let transport = CurlTransport()
            let failures = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<1000 {
                    let size = 100 + index % 50
                    let request = try get(server.baseURL + "/bytes/\(size)")
                    group.addTask {
                        let response = try await transport.send(request)
                        return response.status == .ok
                            && response.body.map(Array.init) == (0..<size).map { UInt8(truncatingIfNeeded: $0) }
                    }
                }
                var failures = 0
                for try await ok in group where !ok { failures += 1 }
                return failures
            }
            #expect(failures == 0)
            #expect(server.requestCount == 1000)
            #expect(transport.activeTransferCount == 0)
        }
    }

    @Test("cancelling 1,000 in-flight requests leaves no transfers, handles or sockets behind")
    func cancelThousand() async throws {
        try await withServer { server in
            // 1,000 connections at once: above the default limits, which would queue most of them.
            let transport = curlTransport {
                $0.maxIdleHandles = 0
                $0.maxConnections = nil
                $0.maxConnectionsPerHost = nil
            }
            server.script("/stall", Array(repeating: .stall, count: 1000))
            let results = ResultsBox()
            var tasks: [TransportTask] = []
            for _ in 0..<1000 {
                tasks.append(transport.start(try get(server.baseURL + "/stall")) { results.add($0) })
            }
            await eventually { server.requestCount >= 1000 }
            #expect(ProcessProbe.socketDescriptors(connectedTo: server.port) == 1000)
            #expect(transport.activeTransferCount == 1000)
            tasks.forEach { $0.cancel() }
            await results.wait(count: 1000)
            #expect(results.all.allSatisfy { $0.failure?.kind == .cancelled })
            #expect(transport.activeTransferCount == 0)
            #expect(transport.easyHandleCount == 0)
            #expect(ProcessProbe.socketDescriptors(connectedTo: server.port) == 0)
        }
    }
}

@Suite("CurlTransport: proxy", .timeLimit(.minutes(2)))
struct CurlTransportProxyTests {
    @Test("requests go through a configured proxy, in absolute form, without resolving the host")
    func proxy() async throws {
        try await withServer { proxy in
            let transport = curlTransport { $0.proxy = .url(proxy.baseURL) }
            proxy.script("http://brick.invalid/resource", [.ok("via proxy")])
            let response = try await transport.send(try get("http://brick.invalid/resource?q=1"))
            #expect(response.status == .ok)
            #expect(response.body == Data("via proxy".utf8))
            let recorded = try #require(proxy.requests.last)
            #expect(recorded.uri == "http://brick.invalid/resource?q=1")
            #expect(recorded.header("Host") == "brick.invalid")
        }
    }

    @Test("noProxy hosts bypass the proxy")
    func noProxy() async throws {
        try await withServer { server in
            var configuration = CurlTransport.Configuration()
            configuration.proxy = .url("http://127.0.0.1:9", noProxy: "127.0.0.1")
            let response = try await CurlTransport(configuration: configuration).send(try get(server.baseURL + "/get"))
            #expect(response.status == .ok)
            #expect(server.requests.last?.uri == "/get")
        }
    }
}

@Suite("CurlTransport: reused easy handles carry nothing over", .timeLimit(.minutes(2)))
struct HandleReuseTests {
    @Test("method, body, headers, timeout and progress of one request never leak into the next")
    func noLeaks() async throws {
        try await withServer { server in
            let transport = curlTransport { $0.maxIdleHandles = 1 }
            let progressCalls = Delivered<Int64>()
            let sequence: [TransportRequest] = [
                try TransportRequest(
                    method: .put,
                    url: server.baseURL + "/anything/1",
                    headers: [("X-Only-First", "1")],
                    body: .data(Data("put-body".utf8)),
                    options: .init(timeout: .seconds(5), progress: { progressCalls.add($0.bytesSent) })
                ),
                try TransportRequest(method: .get, url: server.baseURL + "/anything/2"),
                try TransportRequest(method: .head, url: server.baseURL + "/anything/3"),
                try TransportRequest(
                    method: .post,
                    url: server.baseURL + "/anything/4",
                    body: .data(Data("post".utf8))
                ),
                try TransportRequest(method: .delete, url: server.baseURL + "/anything/5"),
                try TransportRequest(method: .head, url: server.baseURL + "/anything/6"),
                try TransportRequest(method: .get, url: server.baseURL + "/anything/7", headers: [("X-Same", "a")]),
                try TransportRequest(method: .get, url: server.baseURL + "/anything/7", headers: [("X-Same", "a")]),
                try TransportRequest(method: .patch, url: server.baseURL + "/anything/8", body: .data(Data("p".utf8))),
                try TransportRequest(method: .post, url: server.baseURL + "/anything/9"),
                try TransportRequest(method: .get, url: server.baseURL + "/delay/0.3"),
            ]
            var callsAfterFirst = 0
            for (index, request) in sequence.enumerated() {
                let response = try await transport.send(request)
                #expect(response.status == .ok)
                if index == 0 { callsAfterFirst = progressCalls.count }
            }
            #expect(transport.easyHandleCount == 1)
            let recorded = server.requests
            #expect(
                recorded.map(\.method) == [
                    "PUT", "GET", "HEAD", "POST", "DELETE", "HEAD", "GET", "GET", "PATCH", "POST", "GET",
                ]
            )
            #expect(
                recorded.map { String(decoding: $0.body, as: UTF8.self) }
                    == ["put-body", "", "", "post", "", "", "", "", "p", "", ""]
            )
            #expect(
                recorded.map(\.path) == [
                    "/anything/1", "/anything/2", "/anything/3", "/anything/4", "/anything/5", "/anything/6",
                    "/anything/7", "/anything/7", "/anything/8", "/anything/9", "/delay/0.3",
                ]
            )
            #expect(recorded.filter { $0.header("X-Only-First") != nil }.count == 1)
            #expect(
                recorded.map { $0.header("X-Same") != nil } == [
                    false, false, false, false, false, false, true, true, false, false, false,
                ]
            )
            #expect(recorded[9].header("Content-Length") == "0")
            #expect(recorded[1].header("Content-Length") == nil)
            #expect(recorded[1].header("Content-Type") == nil)
            #expect(callsAfterFirst > 0)
            #expect(progressCalls.count == callsAfterFirst)  // later requests have no progress handler
        }
    }

    @Test("bodies of every size arrive whole on a reused handle: in its scratch buffer, pooled, or moved over")
    func bodySizes() async throws {
        try await withServer { server in
            let transport = curlTransport { $0.maxIdleHandles = 1 }
            // Announced lengths around the 4 KiB scratch buffer, then chunked bodies (no length)
            // that stay in it or outgrow it, interleaved so each request follows a different one.
            let paths: [(String, Int)] = [
                ("/bytes/10", 10), ("/bytes/4096", 4096), ("/bytes/4097", 4097), ("/bytes/100", 100),
                ("/stream-bytes/20000?chunk_size=3000", 20000), ("/stream-bytes/3000?chunk_size=700", 3000),
                ("/bytes/65536", 65536), ("/stream-bytes/4096?chunk_size=1000", 4096), ("/bytes/1", 1),
            ]
            for (path, count) in paths {
                let response = try await transport.send(try get(server.baseURL + path))
                let expected = Data((0..<count).map { UInt8($0 % 256) })
                #expect(response.body == expected, "\(path)")
            }
        }
    }

    @Test("a per-request timeout and a response size limit apply to their own request only")
    func limitsDoNotLeak() async throws {
        try await withServer { server in
            let transport = curlTransport { $0.maxIdleHandles = 1 }
            let slow = try TransportRequest(
                method: .get,
                url: server.baseURL + "/delay/0.5",
                options: .init(timeout: .milliseconds(100))
            )
            await #expect(throws: TransportError.self) { try await transport.send(slow) }
            let small = try TransportRequest(
                method: .get,
                url: server.baseURL + "/bytes/4096",
                options: .init(maxResponseSize: 1000)
            )
            let tooLarge = await #expect(throws: TransportError.self) { try await transport.send(small) }
            #expect(tooLarge?.kind == .bodyTooLarge)
            let later = try await transport.send(TransportRequest(method: .get, url: server.baseURL + "/delay/0.3"))
            #expect(later.status == .ok)
            let large = try await transport.send(TransportRequest(method: .get, url: server.baseURL + "/bytes/4096"))
            #expect(large.body?.count == 4096)
            #expect(transport.easyHandleCount == 1)
        }
    }
}
