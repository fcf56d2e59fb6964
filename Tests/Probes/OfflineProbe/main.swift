// brick-offline-probe MODE DIRECTORY NAME [URL] [COUNT]
//
// For the offline tests' crash scenarios, in a process of its own that the test kills:
//   add   DIR NAME URL START  adds POST URL entries numbered from START in a loop, 16 producers
//                             at a time; prints `ack N` (N = the entry's number, its body) once
//                             each add returned
//   fill  DIR NAME URL COUNT  adds COUNT entries (bodies 0..<COUNT), prints `filled`
//   drain DIR NAME            delivers everything, prints `drained` when the queue is empty
//   clock DIR NAME BASEURL     for the clock-step tests (run under libfaketime): adds 10 entries
//                             (bodies 1000…1009) due in 10 minutes, prints `later-added`, then
//                             reads commands on stdin: `mark N` adds entry N to BASEURL/post,
//                             due now (prints `ack N`); `flaky N` adds entry N to
//                             BASEURL/anything/flaky; `cache` GETs BASEURL/cache/clock through
//                             an in-memory cache (prints `cache SOURCE`: network, cache or
//                             revalidated); `date` prints `date SECONDS` (the wall clock it sees)
//   cache-…                   the response cache's modes (CacheProbe.swift)
// Lines are written unbuffered, so what the parent reads is what the probe had acknowledged.
import BrickOffline
import BrickRequest
import Foundation
import Synchronization

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

// Under libfaketime's LD_PRELOAD, Swift's `CommandLine.arguments` came out empty here (its
// constructor runs before the runtime captures argv): the clock tests pass the arguments in
// BRICK_PROBE_ARGUMENTS too, one per line.
let arguments = ProcessInfo.processInfo.environment["BRICK_PROBE_ARGUMENTS"].map {
    ["brick-offline-probe"] + $0.split(separator: "\n").map(String.init)
} ?? CommandLine.arguments
guard arguments.count >= 4 else {
    say("usage: brick-offline-probe add|fill|drain DIR NAME [URL] [COUNT]")
    exit(2)
}
if arguments[1].hasPrefix("cache-") { try runCacheProbe(arguments) }
let directory = URL(fileURLWithPath: arguments[2])
let name = arguments[3]
let session = Session(reachability: AlwaysReachable())
// BRICK_PROBE_SYNC=normal: synchronous=NORMAL (enough against kill -9; FULL adds power loss).
let synchronous: SQLiteOfflineStore.Synchronous =
    ProcessInfo.processInfo.environment["BRICK_PROBE_SYNC"] == "normal" ? .normal : .full
let queue = try PersistentRequestQueue(
    name: name,
    directory: directory,
    session: session,
    retryInterval: .seconds(1),
    synchronous: synchronous
)

func entry(_ number: Int, url: String) throws -> TransportRequest {
    try TransportRequest(
        method: .post,
        url: url,
        headers: [("Content-Type", "text/plain")],
        body: .data(Data(String(number).utf8))
    )
}

switch arguments[1] {
case "add":
    let url = arguments[4]
    // 16 producers share one counter; each number is added once.
    let next = Counter(start: Int(arguments[5]) ?? 0)
    await withTaskGroup(of: Void.self) { group in
        for _ in 0..<16 {
            group.addTask {
                while true {
                    let number = next.take()
                    guard let request = try? entry(number, url: url) else { return }
                    do {
                        _ = try await queue.add(request)
                        say("ack \(number)")
                    } catch {
                        say("error \(number) \(error)")
                    }
                }
            }
        }
    }
case "fill":
    let url = arguments[4]
    let count = Int(arguments[5]) ?? 0
    await withTaskGroup(of: Void.self) { group in
        for producer in 0..<16 {
            group.addTask {
                var number = producer
                while number < count {
                    _ = try? await queue.add(try entry(number, url: url))
                    number += 16
                }
            }
        }
    }
    say("filled \(await queue.count)")
case "drain":
    await queue.waitUntilEmpty()
    say("drained")
case "clock":
    let base = arguments[4]
    for number in 1000..<1010 {
        _ = try await queue.add(
            try entry(number, url: base + "/post"),
            options: .init(notBefore: Date().addingTimeInterval(600))
        )
    }
    say("later-added")
    // Commands are read on a thread of their own: a blocking read must not hold one of the
    // cooperative pool's threads, which the queue's deliveries need.
    let (commands, input) = AsyncStream.makeStream(of: String.self)
    Thread.detachNewThread {
        while let line = readLine() { input.yield(line) }
        input.finish()
    }
    for await command in commands {
        let words = command.split(separator: " ")
        switch words.first {
        case "mark"?, "flaky"?:
            let number = Int(words.dropFirst().first ?? "") ?? 0
            let url = base + (words.first == "mark" ? "/post" : "/anything/flaky")
            _ = try await queue.add(try entry(number, url: url))
            say("ack \(number)")
        case "cache"?:
            let response = await CachedGet(base + "/cache/clock?max_age=60", session: session).response()
            say("cache \(response.error.map { "error \($0.code)" } ?? "\(response.source)")")
        case "date"?:
            say("date \(Int(Date().timeIntervalSince1970))")
        default:
            say("unknown command \(command)")
        }
    }
default:
    say("unknown mode \(arguments[1])")
    exit(2)
}

/// A GET through the session's in-memory response cache, by HTTP's rules.
final class CachedGet: Component, GETRequestType, CachedResponseType, DataResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

/// A number handed out once each, to several tasks.
final class Counter: Sendable {
    private let value: Lock<Int>
    init(start: Int) { value = Lock(start) }
    func take() -> Int { value.withLock { value in defer { value += 1 }; return value } }
}
