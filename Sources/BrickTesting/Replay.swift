public import BrickHAR
import BrickRequest
import FoundationEssentials
import Synchronization
public import Testing

/// How a replay uses its recording, as VCR's record modes.
public enum ReplayMode: String, Sendable, Hashable, CaseIterable {
    /// Record when the file is missing (every request goes to the network and is kept);
    /// replay when it exists.
    case once
    /// Replay; never touch the network. A missing file fails the test. What CI runs.
    case replay
    /// Always record, replacing the file: after the API changed.
    case record
    /// Replay what is recorded; send requests that match nothing to the network and add them.
    case newEpisodes

    /// ``record`` when the environment's `BRICK_RECORD` is `1` (re-record everything), else `self`.
    public var effective: ReplayMode { effective(in: ProcessInfo.processInfo.environment) }

    /// ``record`` when `environment["BRICK_RECORD"]` is `1`, else `self`.
    package func effective(in environment: [String: String]) -> ReplayMode {
        environment["BRICK_RECORD"] == "1" ? .record : self
    }
}

/// Runs `operation` with every session's requests (in this task, as
/// `Session.withEverySessionTransport(_:isolation:operation:)` scopes them) recorded to, or
/// replayed from, the HTTP Archive at `path` — what the `.replay(_:mode:matching:redaction:sourceLocation:)`
/// trait does, for a file you name.
///
/// Replaying, a request no recorded exchange matches fails with a `TransportError` naming the
/// closest one, and is recorded as an issue of the current test when `operation` ends. Recording,
/// the file is written when `operation` ends (also when it throws: what happened is kept),
/// redacted by `redaction`.
///
/// - Parameters:
///   - path: The `.har` file.
///   - mode: How to use it; `BRICK_RECORD=1` in the environment turns every mode into
///     ``ReplayMode/record``.
///   - matching: What must match besides method and URL.
///   - redaction: What to redact when recording.
///   - fileID: The file issues are reported in (the caller's by default: no `import Testing` is
///     needed where this is called, an XCTest case included).
///   - filePath: That file's path.
///   - line: The line issues are reported at.
///   - column: The column.
///   - isolation: The actor `operation` runs on; the caller's by default.
///   - operation: The test's code.
/// - Returns: What `operation` returns.
/// - Throws: `HARError` when the file is missing in ``ReplayMode/replay`` mode or cannot be read or
///   written; what `operation` throws.
public func withReplay<Result>(
    path: String,
    mode: ReplayMode = .replay,
    matching: ReplayMatching = .methodAndURL,
    redaction: HARRedaction = HARRedaction(),
    fileID: String = #fileID,
    filePath: String = #filePath,
    line: Int = #line,
    column: Int = #column,
    isolation: isolated (any Actor)? = #isolation,
    operation: () async throws -> Result
) async throws -> Result {
    try await replaying(
        path: path, mode: mode, matching: matching, redaction: redaction,
        sourceLocation: SourceLocation(fileID: fileID, filePath: filePath, line: line, column: column),
        isolation: isolation, operation: operation
    )
}

/// ``withReplay(path:mode:matching:redaction:fileID:filePath:line:column:isolation:operation:)``
/// with its place given as one `SourceLocation` (the trait's).
func replaying<Result>(
    path: String,
    mode: ReplayMode,
    matching: ReplayMatching,
    redaction: HARRedaction,
    sourceLocation: SourceLocation,
    isolation: isolated (any Actor)?,
    operation: () async throws -> Result
) async throws -> Result {
    let mode = mode.effective
    let exists = FileManager.default.fileExists(atPath: path)
    let existing: HARArchive?
    switch mode {
    case .replay:
        guard exists else {
            throw HARError(
                "no recording at \(path): record it once against the real service (mode .once, or BRICK_RECORD=1 in the environment)"
            )
        }
        existing = try HARArchive(contentsOf: path)
    case .once, .newEpisodes:
        existing = exists ? try HARArchive(contentsOf: path) : nil
    case .record:
        existing = nil
    }
    let recordings = Mutex<[RecordingTransport]>([])
    let unmatched = Mutex<[String]>([])
    let source = path.lastIndex(of: "/").map { String(path[path.index(after: $0)...]) } ?? path
    let makeTransport: @Sendable (Session) -> any Transport = { session in
        let original = session.transport
        func recording() -> RecordingTransport {
            // The session's own credential fields are redacted too (an X-Api-Key it names).
            let made = RecordingTransport(wrapping: original, redaction: redaction.adding(headers: session.configuration.sensitiveHeaders))
            recordings.withLock { $0.append(made) }
            return made
        }
        guard let existing else { return recording() }
        return ReplayTransport(
            archive: existing,
            matching: matching,
            source: source,
            forwardingUnmatchedTo: mode == .newEpisodes ? recording() : nil,
            onUnmatched: { message in unmatched.withLock { $0.append(message) } }
        )
    }
    func finish() throws {
        for message in unmatched.withLock({ $0 }) {
            Issue.record(Comment(rawValue: message), sourceLocation: sourceLocation)
        }
        let recorded = recordings.withLock { $0 }.flatMap(\.exchanges).sorted { $0.startedAt < $1.startedAt }
        guard existing == nil || !recorded.isEmpty else { return }
        let archive = HARArchive(exchanges: (existing?.exchanges ?? []) + recorded)
        // A re-recording of an unchanged service leaves the file byte for byte as it was (its
        // dates, timings and fresh keys would otherwise make every re-record a diff).
        if mode == .record, exists, let previous = try? HARArchive(contentsOf: path), archive.hasSameExchanges(as: previous) {
            return
        }
        try archive.write(to: path)
    }
    do {
        let result = try await Session.withEverySessionTransport(forSession: makeTransport, isolation: isolation, operation: operation)
        try finish()
        return result
    } catch {
        try? finish()
        throw error
    }
}

/// Records a test's HTTP exchanges once and replays them afterwards: see
/// `.replay(_:mode:matching:redaction:sourceLocation:)`.
public struct ReplayTrait: TestTrait, TestScoping {
    /// The recording's name: `Replays/NAME.har` beside the test's source file.
    public let name: String
    /// How the recording is used.
    public let mode: ReplayMode
    /// What must match besides method and URL.
    public let matching: ReplayMatching
    /// What is redacted when recording.
    public let redaction: HARRedaction
    /// Where the trait was written.
    public let sourceLocation: SourceLocation

    /// The recording's file: `Replays/NAME.har` in the directory of the test's source file.
    public var path: String {
        let file = sourceLocation.filePath
        let directory = file.lastIndex(of: "/").map { String(file[..<$0]) } ?? "."
        return directory + "/Replays/" + name + ".har"
    }

    /// Runs the test inside ``withReplay(path:mode:matching:redaction:fileID:filePath:line:column:isolation:operation:)``.
    public func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        try await replaying(
            path: path, mode: mode, matching: matching, redaction: redaction, sourceLocation: sourceLocation, isolation: nil
        ) {
            try await function()
        }
    }
}

extension Trait where Self == ReplayTrait {
    /// Runs the test with every `Session`'s requests answered from the HTTP Archive
    /// `Replays/NAME.har` beside the test's source file, or recorded into it:
    ///
    /// ```swift
    /// @Test(.replay("fetchUser"))                  // replay; a missing file fails the test
    /// func fetchUser() async throws {
    ///     let user = try await GetUser(userID: "100").value
    ///     #expect(user.name == "Ada")
    /// }
    /// @Test(.replay("fetchUser", mode: .once))     // record the first time, replay afterwards
    /// ```
    ///
    /// Every session that runs a request in the test (its task, child tasks, the `Task { }`s they
    /// make) does so on a session of the test's own with the same configuration and a replay
    /// transport: no global interception, tests in parallel unaffected. `BRICK_RECORD=1` in the
    /// environment re-records every such test against the real service.
    ///
    /// - Parameters:
    ///   - name: The recording's name.
    ///   - mode: How it is used. Default ``ReplayMode/replay``.
    ///   - matching: What must match besides method and URL.
    ///   - redaction: What is redacted when recording (credential header fields always are).
    ///   - sourceLocation: The test's file, whose directory holds `Replays/`.
    /// - Returns: The trait.
    public static func replay(
        _ name: String,
        mode: ReplayMode = .replay,
        matching: ReplayMatching = .methodAndURL,
        redaction: HARRedaction = HARRedaction(),
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> Self {
        ReplayTrait(name: name, mode: mode, matching: matching, redaction: redaction, sourceLocation: sourceLocation)
    }
}
