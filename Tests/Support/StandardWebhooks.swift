import BrickTestServer
import Foundation

/// Checks Standard Webhooks signatures with the specification's own Python package
/// (`standardwebhooks` from PyPI): a verifier no one here wrote.
package enum StandardWebhooks {
    /// One received message: its three header fields and its body bytes.
    package struct Message: Codable, Sendable {
        package var id: String
        package var timestamp: String
        package var signature: String
        package var body: Data

        /// The message a test server received: its three header fields and its body.
        package init(received request: RecordedRequest) {
            id = request.header("webhook-id") ?? ""
            timestamp = request.header("webhook-timestamp") ?? ""
            signature = request.header("webhook-signature") ?? ""
            body = Data(request.body)
        }
    }

    /// For each secret, for each message: `ok`, or the verifier's error.
    package static func verify(_ messages: [Message], secrets: [String]) async throws -> [[String]] {
        let directory = NSTemporaryDirectory() + "brick-webhooks-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        struct Input: Codable { var messages: [Message]; var secrets: [String] }
        try JSONEncoder().encode(Input(messages: messages, secrets: secrets))
            .write(to: URL(fileURLWithPath: directory + "/input.json"))
        let script = """
            import base64, json, sys
            from standardwebhooks.webhooks import Webhook
            data = json.load(open(sys.argv[1]))
            out = []
            for secret in data["secrets"]:
                row = []
                for m in data["messages"]:
                    headers = {"webhook-id": m["id"], "webhook-timestamp": m["timestamp"], "webhook-signature": m["signature"]}
                    try:
                        Webhook(secret).verify(base64.b64decode(m["body"]), headers, json_parse=False)
                        row.append("ok")
                    except Exception as error:
                        row.append(f"{type(error).__name__}: {error}")
                out.append(row)
            print(json.dumps(out))
            """
        try script.write(toFile: directory + "/verify.py", atomically: true, encoding: .utf8)
        let output = try await Subprocess.run("python3 '\(directory)/verify.py' '\(directory)/input.json'")
        return try JSONDecoder().decode([[String]].self, from: Data(output.utf8))
    }
}
