@testable import BrickRequestCore
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Testing

final class DeliverEvent: Component, POSTRequestType, SignedWebhookType, IdempotentRequestType, DataResponseType {
    let urlString: String
    let session: Session
    let webhookSigner: WebhookSigner
    let requestBody: RequestBody?
    var headers: [String: String] { ["Content-Type": "application/json"] }
    var autoRetryConfiguration: AutoRetryConfiguration { AutoRetryConfiguration(breakTime: .seconds(5), maxRetryCount: 2) }

    init(_ url: String, session: Session, signer: WebhookSigner, body: Data) {
        urlString = url
        self.session = session
        webhookSigner = signer
        requestBody = .data(body)
        super.init()
    }
}

@Suite("Signed webhooks: the Standard Webhooks specification, checked by its own verifier", .timeLimit(.minutes(2)))
struct SignedWebhookTests {
    static let newSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    static let oldSecret = "whsec_" + Data((0..<32).map { UInt8($0 * 7 & 0xFF) }).base64EncodedString()

    private static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test("SHA-256 and HMAC-SHA256 give the published test vectors (FIPS 180-2, RFC 4231), long keys and messages too")
    func digests() {
        #expect(Self.hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Self.hex(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            Self.hex(SHA256.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        )
        #expect(
            Self.hex(SHA256.hmac(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8)))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        )
        // RFC 4231 case 6: a key longer than a block is hashed first.
        #expect(
            Self.hex(
                SHA256.hmac(
                    key: [UInt8](repeating: 0xAA, count: 131),
                    message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)
                )
            ) == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        )
    }

    @Test("the specification's test vector; a bad secret is refused without showing it")
    func specVector() throws {
        let signer = try WebhookSigner(secret: Self.newSecret)
        let signature = signer.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Array(#"{"test": 2432232314}"#.utf8))
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        for bad in ["whsec_not base64!", "whsec_c2hvcnQ=", ""] {
            #expect {
                _ = try WebhookSigner(secret: bad)
            } throws: { error in
                (error as? BrickError)?.code == .invalidRequest && !"\(error)".contains("c2hvcnQ")
            }
        }
        #expect(throws: BrickError.self) { _ = try WebhookSigner(secrets: []) }
        #expect(WebhookSigner.generateSecret().hasPrefix("whsec_"))
    }

    @Test("our verify: accepts its own and a rotated signature; refuses another body, another secret, an old timestamp")
    func verify() throws {
        let signer = try WebhookSigner(secrets: [Self.newSecret, Self.oldSecret])
        let receiverOld = try WebhookSigner(secret: Self.oldSecret)
        let body = Array("{\"name\":\"Zoë 🚀\"}".utf8)
        let now = Date()
        let fields = Dictionary(uniqueKeysWithValues: signer.headers(id: "msg_1", date: now, body: body).map { ($0.name, $0.value) })
        let (id, timestamp, signatures) = (fields["webhook-id"]!, fields["webhook-timestamp"]!, fields["webhook-signature"]!)
        #expect(signatures.split(separator: " ").count == 2)
        try receiverOld.verify(id: id, timestamp: timestamp, signatures: signatures, body: body, now: now)
        #expect(throws: BrickError.self) {
            try receiverOld.verify(id: id, timestamp: timestamp, signatures: signatures, body: body + [0x20], now: now)
        }
        #expect(throws: BrickError.self) {
            try WebhookSigner(secret: WebhookSigner.generateSecret())
                .verify(id: id, timestamp: timestamp, signatures: signatures, body: body, now: now)
        }
        #expect(throws: BrickError.self) {
            try receiverOld.verify(id: id, timestamp: timestamp, signatures: signatures, body: body, now: now.addingTimeInterval(301))
        }
    }

    @Test("sent through a session to a real server: a non-ASCII body, a retry with the same id and a new timestamp, two keys; the official verifier accepts every attempt with either key")
    func session() async throws {
        try await withServer { server in
            server.script("/hooks", [.status(503), .ok("thanks")])
            let clock = ManualClock()
            let session = Session(clock: clock)
            let signer = try WebhookSigner(secrets: [Self.newSecret, Self.oldSecret])
            let body = Data("{\"name\":\"Zoë 🚀\",\"amount\":12}".utf8)
            let call = Task { await DeliverEvent(server.baseURL + "/hooks", session: session, signer: signer, body: body).response() }
            await eventually { clock.waiterCount > 0 }
            clock.advance(by: .seconds(5))
            let response = await call.value
            #expect(response.status == .ok)
            #expect(response.retryCount == 1)
            let sent = server.requests(path: "/hooks")
            try #require(sent.count == 2)
            let messages = sent.map(StandardWebhooks.Message.init(received:))
            #expect(messages[0].id == messages[1].id, "the same id on every attempt")
            #expect(messages[0].id == sent[0].header("Idempotency-Key"), "the endpoint's idempotency key")
            #expect(Int(messages[1].timestamp)! - Int(messages[0].timestamp)! == 5, "each attempt signed afresh")
            #expect(messages.allSatisfy { $0.body == body })
            let verdicts = try await StandardWebhooks.verify(messages, secrets: [Self.newSecret, Self.oldSecret])
            #expect(verdicts == [["ok", "ok"], ["ok", "ok"]])
            let stranger = try await StandardWebhooks.verify(messages, secrets: [WebhookSigner.generateSecret()])
            #expect(stranger.first?.allSatisfy { $0 != "ok" } == true, "\(stranger)")
        }
    }

    @Test("a file body cannot be signed: invalidRequest, nothing sent")
    func fileBody() async throws {
        try await withServer { server in
            let path = NSTemporaryDirectory() + "brick-webhook-\(UUID().uuidString)"
            try Data("x".utf8).write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            final class FileHook: Component, POSTRequestType, SignedWebhookType, DataResponseType {
                let urlString: String
                let webhookSigner: WebhookSigner
                let requestBody: RequestBody?
                init(_ url: String, _ signer: WebhookSigner, _ path: String) {
                    urlString = url
                    webhookSigner = signer
                    requestBody = .file(path: path)
                    super.init()
                }
            }
            let response = await FileHook(server.baseURL + "/hooks", try WebhookSigner(secret: Self.newSecret), path).response()
            #expect(response.error?.code == .invalidRequest)
            #expect(response.error?.message.contains("in memory") == true)
            #expect(server.requests(path: "/hooks").isEmpty)
        }
    }
}
