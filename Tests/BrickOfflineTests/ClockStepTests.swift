import BrickOffline
import BrickOfflineTestSupport
import BrickRequest
import BrickTestServer
import BrickTestSupport
import BrickTesting
import Foundation
import Glibc
import Synchronization
import Testing

/// Steps of the wall clock (NTP correcting a clock, a VM resumed, an operator's `date -s`) under a
/// running worker: its queue and its cache must judge time by what passed, not by what the wall
/// clock says happened.
@Suite("The wall clock steps an hour back and a day forward under a worker (libfaketime)", .timeLimit(.minutes(3)))
struct ClockStepTests {
    /// Debian's libfaketime (package `faketime`), the thread-safe build.
    static var libfaketime: String? {
        ["/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"]
            .first { FileManager.default.fileExists(atPath: $0) }
    }

    @Test("a worker's queue and cache across a step back of an hour and forward of 25 hours: nothing due early, nothing waits for ever, nothing served stale")
    func queueAndCacheAcrossSteps() async throws {
        let library = try #require(Self.libfaketime, "libfaketime is missing: apt-get install faketime")
        try await withServer { server in
            try await withDirectory { directory in
                let clockFile = directory.appendingPathComponent("faketime").path
                func step(to offset: String) throws {
                    try offset.write(toFile: clockFile, atomically: true, encoding: .utf8)
                }
                try step(to: "+0")
                // The wall clock is faked; the monotonic clock is not (as with a real step).
                let arguments = ["clock", directory.path, "clock", server.baseURL]
                let probe = try CrashTests.Probe(
                    arguments,
                    environment: [
                        "BRICK_PROBE_ARGUMENTS": arguments.joined(separator: "\n"), "LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": clockFile, "FAKETIME_CACHE_DURATION": "1",
                        "DONT_FAKE_MONOTONIC": "1",
                    ],
                    takesInput: true
                )
                defer { Glibc.kill(probe.pid, SIGKILL) }
                /// Asks the probe for its wall clock until it reads `seconds` from now (± 60 s):
                /// the step has reached it.
                func waitForStep(of seconds: Int) async {
                    await eventually {
                        // Each look asks once and waits for that answer (no sleep between looks).
                        let asked = probe.lines().filter { $0.hasPrefix("date ") }.count
                        probe.send("date")
                        let seen = await poll(within: .seconds(30)) { () -> Int? in
                            let answers = probe.lines().filter { $0.hasPrefix("date ") }
                            return answers.count > asked ? Int(answers.last!.dropFirst(5)) : nil
                        } ?? 0
                        return abs(seen - (Int(Date().timeIntervalSince1970) + seconds)) < 60
                    }
                }
                func delivered() -> [Int] {
                    server.requests(path: "/post").compactMap { Int(String(decoding: $0.body, as: UTF8.self)) }
                }
                func cacheAnswer() async -> String? {
                    let before = probe.lines().filter { $0.hasPrefix("cache ") }.count
                    probe.send("cache")
                    return await poll(within: .seconds(30)) {
                        let answers = probe.lines().filter { $0.hasPrefix("cache ") }
                        return answers.count > before ? answers.last : nil
                    }
                }
                func mark(_ number: Int) async {
                    probe.send("mark \(number)")
                    await eventually { delivered().contains(number) }
                }
                await probe.line { $0 == "later-added" }
                await waitForStep(of: 0)
                #expect(await cacheAnswer() == "cache network")
                #expect(await cacheAnswer() == "cache cache")
                await mark(1)

                // An entry that failed is paused for the queue's retry interval (1 s); then the clock
                // steps back an hour. It still goes a second later, not an hour later.
                server.script("/anything/flaky", [.status(500)])
                probe.send("flaky 3")
                await eventually { server.requests(path: "/anything/flaky").count >= 1 }
                try step(to: "-1h")
                await waitForStep(of: -3_600)
                // (Under a loaded machine the retry may come before the step reached the probe;
                // after it, it must come all the same.)
                await eventually { server.requests(path: "/anything/flaky").count >= 2 }
                // The response stored a moment ago is "from the future" now: its age is unknown, so
                // it is revalidated, not served fresh for the hour until the clock catches up.
                let afterBack = await cacheAnswer()
                #expect(afterBack == "cache revalidated" || afterBack == "cache network", "\(afterBack ?? "none")")
                await mark(2)

                // 25 hours forward: what was due in 10 minutes is not due; new work goes at once; a
                // response stored a moment ago (by the wall clock: a day) is not served fresh.
                try step(to: "+1d")
                await waitForStep(of: 86_400)
                await mark(4)
                let afterForward = await cacheAnswer()
                #expect(afterForward == "cache revalidated" || afterForward == "cache network", "\(afterForward ?? "none")")

                // The barrier: entries 1, 2 and 4 went, in order, each once; the ten due in ten
                // minutes (of real time) did not.
                #expect(delivered() == [1, 2, 4], "\(delivered())")
                #expect(!delivered().contains { $0 >= 1000 })
                _ = await probe.kill()
            }
        }
    }

    @Test("a write of the outcome slower than the lease: the lease is extended through it; delivered once, no loss reported", arguments: ["queue", "manager"])
    func leaseKeptThroughTheOutcomesWrite(by worker: String) async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let inner = try SQLiteOfflineStore(name: "slow-write", directory: directory)
                let wrote = Mutex(false)
                // Each `complete` waits for three extensions after it began (~300 ms: longer than
                // the 300 ms lease). Were the lease no longer kept, none would come.
                let holder = Mutex<ObservedStore?>(nil)
                let store = ObservedStore(inner, leaseDuration: .milliseconds(300)) { _ in
                    guard let observed = holder.withLock({ $0 }) else { return }
                    let before = observed.extensionCount
                    let kept = await poll(within: .seconds(10)) { observed.extensionCount >= before + 3 ? true : nil }
                    if kept == nil { Issue.record("the lease was not extended while the outcome was written") }
                    wrote.withLock { $0 = true }
                }
                holder.withLock { $0 = store }
                let sale = RecordSale(server.baseURL + "/anything/slow-write", amount: 1)
                /// Every event up to the one `last` names, described: no store failure (a lease
                /// reported lost) may be among them.
                func described<Events: AsyncSequence>(_ events: Events, upTo last: String) async throws -> [String] {
                    var seen: [String] = []
                    for try await event in events {
                        seen.append("\(event)")
                        if seen.last?.hasPrefix(last) == true { break }
                    }
                    return seen
                }
                let seen: [String]
                if worker == "queue" {
                    let queue = PersistentRequestQueue(name: "slow-write", store: store, session: session(), retryInterval: .seconds(30))
                    let events = queue.events
                    try await queue.add(sale)
                    await queue.waitUntilEmpty()
                    seen = try await described(events, upTo: "delivered")
                } else {
                    let manager = OfflineRequestManager(name: "slow-write", store: store, session: session())
                    let events = manager.events
                    try await manager.queueRequest(sale)
                    await manager.waitUntilEmpty()
                    seen = try await described(events, upTo: "finished")
                    manager.close()
                }
                #expect(seen.last.map { $0.hasPrefix("delivered") || $0.hasPrefix("finished") } == true, "\(seen)")
                #expect(wrote.withLock { $0 })
                #expect(server.requests(path: "/anything/slow-write").count == 1)
                #expect(try await inner.count(queue: "slow-write") == 0)
                #expect(!seen.contains { $0.lowercased().contains("fail") }, "\(seen)")
            }
        }
    }

    @Test("a lease extended while the loop's clock is an hour ahead of the wall clock is dated on the loop's clock: the attempt is never leased again under it")
    func leaseOnTheLoopsClock() async throws {
        try await withServer { server in
            try await withDirectory { directory in
                let inner = try SQLiteOfflineStore(name: "lease", directory: directory)
                // Extended every 100 ms, so that a 1.5 s attempt sees several extensions.
                let store = ObservedStore(inner, leaseDuration: .milliseconds(300))
                let clock = ManualClock()
                let queue = PersistentRequestQueue(name: "lease", store: store, session: session(clock: clock), retryInterval: .seconds(30))
                // The wall clock steps back an hour: the loop's clock, monotonic, is now an hour ahead.
                clock.advance(by: .seconds(3_600))
                var extensions = store.extensions.makeAsyncIterator()
                try await queue.add(RecordSale(server.baseURL + "/delay/1.5", amount: 1))
                let extended = try #require(await extensions.next())
                // Dated an hour ahead of the wall clock (the loop's clock); on the wall clock it
                // would have expired an hour before the loop looked.
                #expect(extended > Date().addingTimeInterval(3_000), "\(extended)")
                // A second entry wakes the loop while the first runs: with one attempt at a time, it
                // waits for the first, which is not leased again (an expired lease would let it).
                try await queue.add(RecordSale(server.baseURL + "/anything/second", amount: 2))
                await queue.waitUntilEmpty()
                #expect(server.requests(path: "/delay/1.5").count == 1)
                #expect(server.requests(path: "/anything/second").count == 1)
            }
        }
    }
}
