// brick-metrics-probe
//
// For the test suite: `MetricsInstrument` with the process's factory when the backend is
// bootstrapped after the first requests, in a process of its own (`MetricsSystem.bootstrap` is
// once per process). Serves itself on loopback (BrickTestServer), makes requests with no backend
// (the instrument then keeps its "no backend" verdict for a second), bootstraps a test backend,
// and makes requests one after another until one is recorded or 10 s pass. Prints
// `before=N recorded_before=N seen_after_ms=N requests_after=N` (`seen_after_ms=-1`: never seen).
import BrickMetrics
import BrickRequest
import BrickTestServer
import CoreMetrics
import Dispatch
import Glibc
import MetricsTestKit

final class Probe: Component, GETRequestType, DataResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, session: Session) {
        urlString = url
        self.session = session
        super.init()
    }
}

func milliseconds() -> Int {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return time.tv_sec * 1000 + time.tv_nsec / 1_000_000
}

let server = try BrickTestServer.start()
let url = server.baseURL + "/bytes/10"
let session = Session(instruments: [MetricsInstrument()])
let before = 5
for _ in 0..<before {
    _ = await Probe(url, session: session).response()
}
let metrics = TestMetrics()
MetricsSystem.bootstrap(metrics)
// Nothing was recorded before the bootstrap (there was nowhere to record it).
let recordedBefore = metrics.timers.count
let bootstrappedAt = milliseconds()
var seenAfter = -1
var requestsAfter = 0
while milliseconds() - bootstrappedAt < 10_000 {
    _ = await Probe(url, session: session).response()
    requestsAfter += 1
    if metrics.timers.contains(where: { $0.label == "http.client.request.duration" }) {
        seenAfter = milliseconds() - bootstrappedAt
        break
    }
}
print("before=\(before) recorded_before=\(recordedBefore) seen_after_ms=\(seenAfter) requests_after=\(requestsAfter)")
server.shutdown()
