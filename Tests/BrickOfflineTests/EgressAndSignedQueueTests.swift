import BrickOfflineTestSupport
import BrickOffline
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Synchronization
import Testing

/// An endpoint whose webhooks are signed, for a queue.
final class QueuedHook: Component, POSTRequestType, SignedWebhookType {
    let urlString: String
    let webhookSigner: WebhookSigner
    let requestBody: RequestBody?
    let egressPolicy: EgressPolicy?
    var headers: [String: String] { ["Content-Type": "application/json"] }

    init(_ url: String, signer: WebhookSigner, body: String, egressPolicy: EgressPolicy? = nil) {
        urlString = url
        webhookSigner = signer
        requestBody = .data(Data(body.utf8))
        self.egressPolicy = egressPolicy
        super.init()
    }
}

@Suite("Offline queues: egress refusals are dead letters at once; webhooks signed per attempt, secrets never stored", .timeLimit(.minutes(2)))
struct EgressAndSignedQueueTests {
    static let secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_" + Data(repeating: 0x5A, count: 32).base64EncodedString()]

    @Test("a delivery to a refused address: a dead letter with the reason after exactly one attempt that sent nothing", arguments: StoreKind.allCases)
    func refusedIsDeadLetter(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                var configuration = Session.Configuration()
                configuration.transport.proxy = .none
                configuration.egressPolicy = .publicInternetOnly
                let session = Session(configuration: configuration, reachability: ManualReachability(), clock: ManualClock())
                let queue = PersistentRequestQueue(name: "hooks", store: try await place.open("hooks"), session: session)
                let failure = Lock<BrickError?>(nil)
                let id = try await queue.add(RecordSale(server.baseURL + "/post", amount: 1)) { result in
                    if case .failure(let error) = result { failure.withLock { $0 = error } }
                }
                await queue.waitUntilEmpty()
                let dead = try await queue.deadLetters()
                #expect(dead.map(\.id) == [id])
                #expect(dead.first?.attempts == 1)
                let reason = dead.first?.deadLetter?.reason ?? ""
                #expect(reason.contains("egress refused") && reason.contains("127.0.0.1 is loopback"), "\(reason)")
                #expect(server.requests(path: "/post").isEmpty, "nothing was sent")
                await eventually { failure.withLock { $0 != nil } }
            }
        }
    }

    @Test("an endpoint's own policy is stored with the entry: a queue on an unrestricted session still obeys it")
    func storedPolicy() async throws {
        try await withServer { server in
            try await withStorePlace(.sqlite) { place in
                let session = Session(reachability: ManualReachability(), clock: ManualClock())
                let signer = try WebhookSigner(secrets: Self.secrets)
                let queue = PersistentRequestQueue(
                    name: "hooks",
                    store: try await place.open("hooks"),
                    session: session,
                    webhookSigner: signer
                )
                let id = try await queue.add(QueuedHook(server.baseURL + "/hook", signer: signer, body: "{}", egressPolicy: .publicInternetOnly))
                await queue.waitUntilEmpty()
                #expect(try await queue.deadLetters().map(\.id) == [id])
                #expect(server.requests(path: "/hook").isEmpty)
            }
        }
    }

    @Test("signed by the queue at each attempt: webhook-id is the entry's idempotency key, a fresh timestamp per attempt, two keys; the official verifier accepts them; the store holds no secret and no signature", arguments: StoreKind.allCases)
    func signed(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                server.script("/hook", [.status(503), .ok("thanks")])
                let clock = ManualClock()
                let signer = try WebhookSigner(secrets: Self.secrets)
                let queue = PersistentRequestQueue(
                    name: "hooks",
                    store: try await place.open("hooks"),
                    session: session(clock: clock),
                    retryInterval: .seconds(30),
                    webhookSigner: signer
                )
                let body = "{\"event\":\"paid\",\"customer\":\"Zoë\"}"
                var events = queue.events.makeAsyncIterator()
                try await queue.add(QueuedHook(server.baseURL + "/hook", signer: signer, body: body))
                guard case .paused? = await events.next() else {
                    Issue.record("no pause after the 503")
                    return
                }
                if kind == .sqlite {
                    // What the store holds between the attempts: never a secret or a signature.
                    var file = Data()
                    for name in try FileManager.default.contentsOfDirectory(atPath: place.directory.path) where name.hasPrefix("hooks") {
                        file.append(try Data(contentsOf: place.directory.appendingPathComponent(name)))
                    }
                    // (JSON: the URL's slashes are escaped.)
                    #expect(file.range(of: Data(server.baseURL.dropFirst(7).utf8)) != nil, "the entry is in these files")
                    for secret in Self.secrets {
                        let key = try #require(Data(base64Encoded: String(secret.dropFirst(6))))
                        #expect(file.range(of: key) == nil)
                        #expect(file.range(of: Data(secret.utf8)) == nil)
                    }
                    #expect(file.range(of: Data("webhook-signature".utf8)) == nil)
                }
                clock.advance(by: .seconds(31))
                await queue.waitUntilEmpty()
                let sent = server.requests(path: "/hook")
                try #require(sent.count == 2)
                let messages = sent.map(StandardWebhooks.Message.init(received:))
                #expect(messages[0].id == messages[1].id)
                #expect(messages[0].id == sent[0].header("Idempotency-Key"))
                #expect((Int(messages[1].timestamp) ?? 0) - (Int(messages[0].timestamp) ?? 0) >= 31)
                #expect(try await StandardWebhooks.verify(messages, secrets: Self.secrets) == [["ok", "ok"], ["ok", "ok"]])
            }
        }
    }

    @Test("a signed endpoint added to a queue without a signer is refused: its secret cannot be stored")
    func needsSigner() async throws {
        try await withStorePlace(.sqlite) { place in
            let queue = PersistentRequestQueue(name: "hooks", store: try await place.open("hooks"), session: session())
            let signer = try WebhookSigner(secrets: Self.secrets)
            await #expect {
                try await queue.add(QueuedHook("https://hooks.example/x", signer: signer, body: "{}"))
            } throws: { error in
                (error as? BrickError)?.code == .invalidRequest && "\(error)".contains("webhookSigner")
            }
            #expect(await queue.count == 0)
        }
    }
}
