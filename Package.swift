// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "BrickRequest",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "BrickRequest", targets: ["BrickRequest"]),
        .library(name: "BrickRequestCore", targets: ["BrickRequestCore"]),
        .library(name: "BrickTesting", targets: ["BrickTesting"]),
        .library(name: "BrickHAR", targets: ["BrickHAR"]),
        .library(name: "BrickOffline", targets: ["BrickOffline"]),
        .library(name: "BrickTestServer", targets: ["BrickTestServer"]),
        .library(name: "BrickOfflinePostgres", targets: ["BrickOfflinePostgres"]),
        .library(name: "BrickLifecycle", targets: ["BrickLifecycle"]),
        .library(name: "BrickOpenAPI", targets: ["BrickOpenAPI"]),
        .library(name: "BrickMetrics", targets: ["BrickMetrics"]),
        .library(name: "BrickOfflineMetrics", targets: ["BrickOfflineMetrics"]),
        .library(name: "BrickTracing", targets: ["BrickTracing"]),
        .executable(name: "brick-demo", targets: ["BrickDemo"]),
        .executable(name: "outbox-worker", targets: ["OutboxWorker"]),
        .executable(name: "brick-queue", targets: ["BrickQueue"]),
        .executable(name: "brick-queue-postgres", targets: ["BrickQueuePostgres"]),
        .library(name: "BrickQueueConsole", targets: ["BrickQueueConsole"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-http-types", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // Only BrickMetrics and BrickTracing build these (small API packages; the process
        // bootstraps a backend). The floors are the versions tested.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.0"),
        // Only BrickOpenAPI builds this (swift-http-types is its one dependency).
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.0"),
        // Only BrickOfflinePostgres builds postgres-nio and NIO's SSL (and crypto); swift-service-
        // lifecycle is built by the products that offer Services (BrickLifecycle, the metrics ones).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.29.0"),
        // Only the brick-queue tools build this.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"]), .yum(["libcurl-devel"]), .brew(["curl"])]
        ),
        .systemLibrary(name: "CNetlink"),
        // Atomic access to the Swift runtime's global-enqueue hook slot (an opt-in of CurlTransport).
        .systemLibrary(name: "CRuntimeHook"),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .yum(["zlib-devel"])]
        ),
        // The core: bricks, sessions, retries, the cache rules, traffic control and the `Transport`
        // seam, with no C import. A transport of your own needs nothing else.
        .target(
            name: "BrickRequestCore",
            dependencies: [
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // HTTP Archives: recording, replay and the flight recorder, on the core's `Transport` seam.
        .target(
            name: "BrickHAR",
            dependencies: [
                "BrickRequestCore",
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        // The libcurl transport (CCurl; CRuntimeHook for its opt-in safe-point resumption).
        .target(
            name: "BrickCurl",
            dependencies: [
                "BrickRequestCore",
                "CCurl",
                "CRuntimeHook",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Reachability from the kernel's routing table (rtnetlink).
        .target(
            name: "BrickNetlink",
            dependencies: ["BrickRequestCore", "CNetlink"]
        ),
        // What users import: the three above, re-exported, and the defaults that join them
        // (`Session(configuration:)` on a CurlTransport, `Session.shared`).
        .target(
            name: "BrickRequest",
            dependencies: [
                "BrickRequestCore",
                "BrickCurl",
                "BrickNetlink",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Offline delivery: the queue, the manager, the store protocol and the delivery loop, with
        // no storage engine (the PostgreSQL store and the lifecycle services build on this alone).
        .target(
            name: "BrickOfflineCore",
            dependencies: [
                "BrickRequest",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The store and the response cache on SQLite, through GRDB: its own target, so that users of
        // BrickRequest alone, and a PostgreSQL worker, never build GRDB.
        .target(
            name: "BrickOfflineSQLite",
            dependencies: [
                "BrickOfflineCore",
                "BrickRequest",
                "CZlib",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // What `import BrickOffline` gives: the two above, re-exported.
        .target(
            name: "BrickOffline",
            dependencies: ["BrickOfflineCore", "BrickOfflineSQLite"]
        ),
        // The offline queue on PostgreSQL, for fleets: its own target, so that users of BrickRequest
        // or BrickOffline never build postgres-nio (they still resolve it: SwiftPM resolves a
        // package's whole graph).
        .target(
            name: "BrickOfflinePostgres",
            dependencies: [
                "BrickLifecycle",
                "BrickOfflineCore",
                "BrickRequest",
                // Built by postgres-nio already (PostgresClient is a Service): PostgresQueueService.
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A ClientTransport of swift-openapi-runtime on a Session: generated clients get the
        // session's transport, retries, parking, cache and instruments.
        .target(
            name: "BrickOpenAPI",
            dependencies: [
                "BrickRequest",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        // The offline queue and manager as swift-service-lifecycle Services (graceful shutdown).
        .target(
            name: "BrickLifecycle",
            dependencies: [
                "BrickOfflineCore", "BrickRequest",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // swift-metrics for a session's requests (OpenTelemetry's names): its own target, so that
        // users of BrickRequest alone never build swift-metrics.
        .target(
            name: "BrickMetrics",
            dependencies: [
                "BrickRequest",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        // swift-metrics for an offline queue (depth, deliveries, dead letters, oldest entry's age),
        // a Service to run beside it: apart from BrickMetrics, so that it never builds GRDB.
        .target(
            name: "BrickOfflineMetrics",
            dependencies: [
                "BrickOfflineCore",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // swift-distributed-tracing: a client span per attempt, the trace's context injected.
        .target(
            name: "BrickTracing",
            dependencies: [
                "BrickRequest",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        .target(
            name: "BrickTesting",
            dependencies: ["BrickRequest", "BrickHAR"]
        ),
        .target(
            name: "BrickTestServer",
            dependencies: [
                "CZlib",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // What the test targets share (not a product): the loopback server's scope, the bounded
        // `eventually`, processes spawned without inheriting the test's descriptors.
        .target(
            name: "BrickTestSupport",
            dependencies: ["BrickTestServer"],
            path: "Tests/Support"
        ),
        .executableTarget(
            name: "BrickDemo",
            dependencies: ["BrickRequest", "BrickOffline", "BrickTestServer"],
            path: "Samples/BrickDemo"
        ),
        // A fleet worker delivering a PostgreSQL outbox (swift run outbox-worker; see its header).
        // It builds no GRDB: a PostgreSQL worker needs BrickOfflinePostgres, not BrickOffline.
        .executableTarget(
            name: "OutboxWorker",
            dependencies: [
                "BrickLifecycle", "BrickOfflinePostgres", "BrickRequest",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Samples/OutboxWorker"
        ),
        // The web console of the queues: Hummingbird routes a service mounts, or `brick-queue serve`.
        .target(
            name: "BrickQueueConsole",
            dependencies: [
                "BrickOfflineCore", "BrickRequest",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The operator's commands (not a product), store-neutral: each tool below opens its own
        // store, so that a service on one store builds only that store's client (library users
        // never build any of this, nor swift-argument-parser).
        .target(
            name: "BrickQueueCommands",
            dependencies: [
                "BrickOfflineCore", "BrickRequest", "BrickQueueConsole",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // brick-queue: SQLite store files (GRDB; never postgres-nio nor BoringSSL).
        .executableTarget(
            name: "BrickQueue",
            dependencies: ["BrickOfflineCore", "BrickOfflineSQLite", "BrickQueueCommands"]
        ),
        // brick-queue-postgres: a fleet's PostgreSQL store (postgres-nio; never GRDB).
        .executableTarget(
            name: "BrickQueuePostgres",
            dependencies: [
                "BrickOfflineCore", "BrickOfflinePostgres", "BrickQueueCommands",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // For the test suite: measures a large download's memory in a process of its own.
        .executableTarget(
            name: "brick-memory-probe",
            dependencies: ["BrickRequest", "BrickHAR", "BrickTestServer"],
            path: "Tests/Probes/MemoryProbe"
        ),
        // For the test suite: many requests under a resource limit (ulimit -n, ulimit -v) that its
        // parent sets, against a server in the parent.
        .executableTarget(
            name: "brick-limits-probe",
            dependencies: ["BrickRequest"],
            path: "Tests/Probes/LimitsProbe"
        ),
        // For the test suite: requests inside a network namespace whose resolver the test runs.
        .executableTarget(
            name: "brick-dns-probe",
            dependencies: ["BrickRequest"],
            path: "Tests/Probes/DNSProbe"
        ),
        // For the test suite: MetricsInstrument when the process's backend is bootstrapped after
        // the first requests (a bootstrap is once per process).
        .executableTarget(
            name: "brick-metrics-probe",
            dependencies: [
                "BrickRequest", "BrickMetrics", "BrickTestServer",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            path: "Tests/Probes/MetricsProbe"
        ),
        // For the test suite: what a transport does to the runtime's process-wide enqueue hook,
        // observed in a process of its own.
        .executableTarget(
            name: "brick-hook-probe",
            dependencies: ["BrickRequest", "CRuntimeHook"],
            path: "Tests/Probes/HookProbe"
        ),
        .testTarget(
            name: "BrickRequestTests",
            dependencies: [
                "BrickRequest", "BrickTesting", "BrickTestServer", "BrickTestSupport", "CCurl",
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        // For the offline tests: adds or drains a queue in a process of its own, to be killed.
        .executableTarget(
            name: "brick-offline-probe",
            dependencies: [
                "BrickOffline", "BrickRequest", .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            path: "Tests/Probes/OfflineProbe"
        ),
        // For the fleet tests: a worker draining a queue on PostgreSQL, in a process of its own.
        .executableTarget(
            name: "brick-fleet-probe",
            dependencies: [
                "BrickLifecycle", "BrickOffline", "BrickOfflinePostgres", "BrickRequest",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/Probes/FleetProbe"
        ),
        // What the offline test targets share (not a product): the queue's test brick, a store's
        // place on SQLite or PostgreSQL, the private PostgreSQL server the tests start.
        .target(
            name: "BrickOfflineTestSupport",
            dependencies: [
                "BrickOffline", "BrickOfflinePostgres", "BrickRequest", "BrickTesting", "BrickTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/OfflineSupport"
        ),
        .testTarget(
            name: "BrickOfflineTests",
            dependencies: [
                "BrickOffline", "BrickOfflineTestSupport", "BrickRequest",
                "BrickTesting", "BrickTestServer", "BrickTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            exclude: ["PowerLoss"]
        ),
        // The PostgreSQL store: a fleet, its fenced leases, the outbox, the fixture's cleanup.
        .testTarget(
            name: "BrickOfflinePostgresTests",
            dependencies: [
                "BrickLifecycle", "BrickOffline", "BrickOfflinePostgres", "BrickOfflineTestSupport", "BrickRequest",
                "BrickTesting", "BrickTestServer", "BrickTestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Proxy"]
        ),
        .testTarget(
            name: "BrickLifecycleTests",
            dependencies: [
                "BrickLifecycle", "BrickOffline", "BrickOfflineMetrics", "BrickOfflineTestSupport", "BrickRequest",
                "BrickTesting", "BrickTestServer", "BrickTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // brick-queue, the built binary, against a SQLite file and the fixture's PostgreSQL.
        .testTarget(
            name: "BrickQueueTests",
            dependencies: [
                "BrickOffline", "BrickOfflinePostgres", "BrickOfflineTestSupport", "BrickRequest", "BrickTestServer",
                "BrickTestSupport", "BrickQueueConsole",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Browser"]
        ),
        // The test doubles themselves (ManualClock, StubTransport).
        .testTarget(
            name: "BrickTestingTests",
            dependencies: ["BrickRequest", "BrickTesting", "BrickHAR", "BrickTestServer", "BrickTestSupport"],
            exclude: ["Replays"]
        ),
        // The client in Generated/ is swift-openapi-generator's output for openapi.yaml, committed
        // (Scripts/generate-openapi-client.sh regenerates it), so CI never builds the generator.
        .testTarget(
            name: "BrickOpenAPITests",
            dependencies: [
                "BrickOpenAPI", "BrickRequest", "BrickTestServer", "BrickTestSupport",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            exclude: ["openapi.yaml", "openapi-generator-config.yaml"]
        ),
        .testTarget(
            name: "BrickInstrumentTests",
            dependencies: [
                "BrickRequest", "BrickMetrics", "BrickTracing", "BrickTesting", "BrickTestServer", "BrickTestSupport",
                "BrickOffline", "BrickOfflineMetrics", "BrickOfflineTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["BrickRequest", "BrickTestServer", "BrickTestSupport"],
            exclude: ["HTTP2", "DNS"]
        ),
    ]
)

// Upcoming language features for every target (swift-log's pattern); no unsafe compiler flags.
for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    target.swiftSettings = settings
}

// The parsers' libFuzzer entry points (Tests/Fuzz): declared only when Scripts/fuzz.sh or
// Scripts/sanitize.sh builds them (BRICK_FUZZ=1, with coverage instrumentation and AddressSanitizer,
// Scripts/ci-lib.sh's asan_build), because only those builds pass where libFuzzer is.
if Context.environment["BRICK_FUZZ"] != nil {
    package.targets += [
        .systemLibrary(name: "CFuzzer", path: "Tests/Fuzz/CFuzzer"),
        .executableTarget(
            name: "brick-fuzz",
            dependencies: [
                "BrickOffline", "BrickRequest", "CFuzzer",
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            path: "Tests/Fuzz/BrickFuzz"
        ),
    ]
}

// The suites the sanitizers run on every CI run (Scripts/sanitize.sh, BRICK_SANITIZER_SUBSET=1):
// the transport, session, safe point, cache, queue and manager on SQLite, without the targets that
// only add build time under instrumentation (PostgreSQL, OpenAPI, tracing, the integration tests).
if Context.environment["BRICK_SANITIZER_SUBSET"] != nil {
    // With BRICK_FUZZ too, brick-fuzz is built beside the AddressSanitizer suites, from the same
    // objects (Scripts/sanitize.sh and Scripts/fuzz.sh share one build).
    let kept: Set<String> = [
        "CCurl", "CNetlink", "CRuntimeHook", "CZlib", "BrickRequestCore", "BrickCurl", "BrickNetlink", "BrickRequest",
        "BrickOffline", "BrickOfflineCore", "BrickOfflineSQLite", "BrickTesting", "BrickHAR",
        "BrickTestingTests", "BrickTestServer", "BrickTestSupport", "BrickOfflineTestSupport", "brick-offline-probe",
        "BrickLifecycle", "BrickOfflineMetrics", "BrickRequestTests", "BrickOfflineTests", "BrickLifecycleTests",
        "CFuzzer", "brick-fuzz",
    ]
    package.targets = package.targets.filter { kept.contains($0.name) }
    package.products = package.products.filter { $0.name == "BrickRequest" || $0.name == "BrickOffline" }
    for target in package.targets where target.name == "BrickOfflineTestSupport" {
        target.exclude += ["PostgresFixture.swift"]
        target.dependencies = ["BrickOffline", "BrickRequest", "BrickTesting", "BrickTestSupport"]
        target.swiftSettings = (target.swiftSettings ?? []) + [.define("BRICK_SQLITE_ONLY")]
    }
}
