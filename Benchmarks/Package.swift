// swift-tools-version:6.0
import Foundation
import PackageDescription

// A path dependency's identity is its directory's name, which depends on where the repository was
// cloned; read it instead of assuming it.
let parentIdentity = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .lastPathComponent.lowercased()

// A nested package so that users of BrickRequest never resolve benchmark tooling.
let package = Package(
    name: "BrickRequestBenchmarks",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "brick-bench", targets: ["BrickBench"]),
        .executable(name: "offline-bench", targets: ["OfflineBench"]),
        .executable(name: "cache-bench", targets: ["CacheBench"]),
        .executable(name: "fleet-bench", targets: ["FleetBench"]),
    ],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        // The raw SQLite baselines of offline-bench and cache-bench: the same library as the store.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    ],
    targets: [
        .executableTarget(
            name: "BrickBench",
            dependencies: [
                .product(name: "BrickRequest", package: parentIdentity),
                .product(name: "BrickMetrics", package: parentIdentity),
                .product(name: "BrickTracing", package: parentIdentity),
            ]
        ),
        .executableTarget(
            name: "OfflineBench",
            dependencies: [
                .product(name: "BrickOffline", package: parentIdentity),
                .product(name: "BrickRequest", package: parentIdentity),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .executableTarget(
            name: "CacheBench",
            dependencies: [
                .product(name: "BrickOffline", package: parentIdentity),
                .product(name: "BrickRequest", package: parentIdentity),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "BrickTestServer", package: parentIdentity),
            ]
        ),
        .executableTarget(
            name: "FleetBench",
            dependencies: [
                .product(name: "BrickOffline", package: parentIdentity),
                .product(name: "BrickOfflinePostgres", package: parentIdentity),
                .product(name: "BrickRequest", package: parentIdentity),
                .product(name: "BrickTestServer", package: parentIdentity),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                // The raw SQLite floor: SQLite's C API (the library the store uses), not GRDB.
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
    ]
)
