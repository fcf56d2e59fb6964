// brick-dns-probe CONNECT_TIMEOUT_MS
//
// For the DNS fault tests, run inside the test's network namespace (`ip netns exec`, which gives
// it the namespace's resolv.conf): one Session with the default transport and reachability
// monitor, and the given connect timeout; reads commands on stdin:
//   get URL RETRIES [POLICY]
//                     a GET that retries up to RETRIES times (0.2 s apart); prints
//                     `result ok status=S body=BODY retries=N ms=M` or
//                     `result error kind=K retries=N ms=M message=…`. With POLICY (`unrestricted`,
//                     `public`, or `public:RANGE` allowing RANGE), on a new session with that
//                     egress policy (and so an empty DNS cache).
// Lines are written unbuffered.
import BrickRequest
import Foundation

final class Get: Component, GETRequestType, DataResponseType {
    let urlString: String
    let session: Session
    let autoRetryConfiguration: AutoRetryConfiguration
    init(_ url: String, session: Session, retries: Int) {
        self.urlString = url
        self.session = session
        self.autoRetryConfiguration = AutoRetryConfiguration(breakTime: .milliseconds(200), maxRetryCount: retries)
        super.init()
    }
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

var configuration = Session.Configuration()
configuration.transport.connectTimeout = .milliseconds(Int(CommandLine.arguments.dropFirst().first ?? "") ?? 10_000)
let session = Session(configuration: configuration)
let (commands, input) = AsyncStream.makeStream(of: String.self)
// Read on a thread of its own: a blocking read must not hold a thread of the cooperative pool.
Thread.detachNewThread {
    while let line = readLine() { input.yield(line) }
    input.finish()
}
say("ready")
for await command in commands {
    let words = command.split(separator: " ").map(String.init)
    guard words.count == 3 || words.count == 4, words[0] == "get", let retries = Int(words[2]) else {
        say("unknown command \(command)")
        continue
    }
    var chosen = session
    if words.count == 4 {
        var own = configuration
        own.transport.proxy = .none
        if words[3] == "public" {
            own.egressPolicy = .publicInternetOnly
        } else if words[3].hasPrefix("public:"), let range = try? EgressPolicy.Destination(String(words[3].dropFirst(7))) {
            own.egressPolicy = .publicInternetOnly(allowing: [range])
        }
        chosen = Session(configuration: own)
    }
    let started = ContinuousClock.now
    let response = await Get(words[1], session: chosen, retries: retries).response()
    let elapsed = ContinuousClock.now - started
    let ms = Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
    if let error = response.error {
        let kind = error.transportError.map { "\($0.kind)" } ?? "\(error.code)"
        say("result error kind=\(kind) retries=\(response.retryCount) ms=\(ms) message=\(error.message)")
    } else {
        let body = response.value.map { String(decoding: $0, as: UTF8.self) }?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        say("result ok status=\(response.status?.code ?? 0) body=\(body) retries=\(response.retryCount) ms=\(ms)")
    }
}
