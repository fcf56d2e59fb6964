import BrickOfflineTestSupport
import BrickOffline
import BrickOfflineMetrics
import BrickRequest
import BrickTestServer
import BrickTestSupport
import Foundation
import MetricsTestKit
import Testing

// 3 minutes: in a whole run the shared PostgreSQL's first start (initdb, pg_ctl) competes with
// hundreds of tests starting at once on two cores and took 55 s (2026-11-29); each PostgreSQL case
// waits for it inside its own limit. Alone, the suite takes seconds.
@Suite("Queue metrics: depth, deliveries, dead letters, the oldest entry's age", .timeLimit(.minutes(3)))
struct QueueMetricsTests {
    @Test("recorded as the queue works; the recorder returns when the queue closes", arguments: StoreKind.allCases)
    func recorded(kind: StoreKind) async throws {
        try await withServer { server in
            try await withStorePlace(kind) { place in
                let metrics = TestMetrics()
                let queue = PersistentRequestQueue(name: "metered", store: try await place.open("metered"), session: session())
                let recorder = Task {
                    await OfflineQueueMetrics(queue, sampleInterval: .milliseconds(20), factory: metrics).run()
                }
                let name = [("brick.queue", "metered")]
                // One entry held for later: the oldest, its age growing.
                try await queue.add(
                    RecordSale(server.baseURL + "/post", amount: 0),
                    options: .init(notBefore: Date().addingTimeInterval(3600))
                )
                let depth = try await eventuallyGauge(metrics, "brick.queue.depth", name)
                let age = try await eventuallyGauge(metrics, "brick.queue.oldest_entry.age", name)
                await eventually { depth.lastValue == 1 && (age.lastValue ?? 0) > 0 }
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 1))
                try await queue.add(RecordSale(server.baseURL + "/status/500", amount: 2), options: .init(maxAttempts: 1))
                try await queue.add(RecordSale(server.baseURL + "/post", amount: 3))
                func deliveries() -> Int64 {
                    metrics.counterTotal(label: "brick.queue.deliveries", dimensions: name + [("http.response.status_code", "200")])
                }
                func deadLetters() -> Int64 { metrics.counterTotal(label: "brick.queue.dead_letters", dimensions: name) }
                await eventually { deliveries() == 2 && deadLetters() == 1 && depth.lastValue == 1 }
                #expect(server.requests(path: "/post").count == 2)
                try await queue.removeAll()
                await eventually { depth.lastValue == 0 && age.lastValue == 0 }
                await queue.close()
                await recorder.childValue  // ends with the queue's streams
            }
        }
    }
}

/// The gauge `label`, once the recorder made it.
private func eventuallyGauge(_ metrics: TestMetrics, _ label: String, _ dimensions: [(String, String)]) async throws -> TestRecorder {
    await eventually { (try? metrics.expectGauge(label, dimensions)) != nil }
    return try metrics.expectGauge(label, dimensions)
}
