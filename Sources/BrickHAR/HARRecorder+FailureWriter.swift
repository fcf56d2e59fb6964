public import BrickRequestCore
import Dispatch
import FoundationEssentials
import Synchronization

extension HARRecorder {
    /// Writes a ``HARRecorder``'s exchanges to a file of its own when a request fails — the flight
    /// recording of an incident, there before anyone asks — at most once per `minimumInterval`.
    ///
    /// ```swift
    /// let recorder = HARRecorder(limit: 200)
    /// let failures = HARRecorder.FailureWriter(recorder, directory: "/var/tmp/api-har", minimumInterval: .seconds(300))
    /// let session = Session(configuration: configuration, eventMonitors: [failures], instruments: [recorder])
    /// ```
    ///
    /// A request fails, by default, when its last attempt ended in a transport failure or a 5xx
    /// (after its retries: the file holds them too); give `when:` to choose otherwise. The file,
    /// `brick-failure-DATE-N.har` (mode 0600), holds what the recorder keeps then — redacted as
    /// it redacts — and is written on a queue of its own, never on the transport's thread. Within
    /// `minimumInterval` of a file, further failures write nothing (``failuresNotWritten`` counts
    /// them): an outage makes one file every interval, not one per request. The oldest of its own
    /// files past `keepingFiles` are removed.
    public final class FailureWriter: EventMonitor {
        /// The recorder whose exchanges are written.
        public let recorder: HARRecorder
        /// The directory the files go to (created when missing).
        public let directory: String
        private let minimumInterval: Duration
        private let keepingFiles: Int
        private let fails: @Sendable (Result<TransportResponse, TransportError>) -> Bool
        private let elapsed: @Sendable () -> Duration
        private let queue = DispatchQueue(label: "brick.har.failure-writer", qos: .utility)
        private let state = Lock(State())

        private struct State {
            var lastWrite: Duration?
            var written = 0
            var notWritten = 0
            var lastError: HARError?
        }

        /// A writer of `recorder`'s exchanges into `directory` when a request fails.
        ///
        /// - Parameters:
        ///   - recorder: The session's recorder (an instrument of the same session).
        ///   - directory: Where the files go.
        ///   - minimumInterval: The least time between two files. Default 5 minutes.
        ///   - keepingFiles: The most of its files kept in `directory`; the oldest go. Default 20.
        ///   - when: Which results are failures. Default ``transportFailuresAndServerErrors(_:)``.
        public convenience init(
            _ recorder: HARRecorder,
            directory: String,
            minimumInterval: Duration = .seconds(300),
            keepingFiles: Int = 20,
            when: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Bool = FailureWriter.transportFailuresAndServerErrors
        ) {
            let start = ContinuousClock.now
            self.init(
                recorder, directory: directory, minimumInterval: minimumInterval, keepingFiles: keepingFiles, when: when,
                elapsed: { ContinuousClock.now - start }
            )
        }

        /// As the public initializer, with the time since some start given (a test's manual clock).
        package init(
            _ recorder: HARRecorder,
            directory: String,
            minimumInterval: Duration,
            keepingFiles: Int,
            when: @escaping @Sendable (Result<TransportResponse, TransportError>) -> Bool,
            elapsed: @escaping @Sendable () -> Duration
        ) {
            self.recorder = recorder
            self.directory = directory
            self.minimumInterval = max(.zero, minimumInterval)
            self.keepingFiles = max(1, keepingFiles)
            self.fails = when
            self.elapsed = elapsed
        }

        /// A transport failure (cancellations aside), or a response with a 5xx status.
        public static func transportFailuresAndServerErrors(_ result: Result<TransportResponse, TransportError>) -> Bool {
            switch result {
            case .success(let response): response.status.code >= 500
            case .failure(let error): error.kind != .cancelled
            }
        }

        /// Files written so far.
        public var filesWritten: Int { state.withLock { $0.written } }
        /// Failures that wrote no file (within `minimumInterval` of the last one).
        public var failuresNotWritten: Int { state.withLock { $0.notWritten } }
        /// Why the last file could not be written (a directory that cannot be made, a full disk),
        /// or `nil`.
        public var lastError: HARError? { state.withLock { $0.lastError } }

        /// Writes a file when `result` is a failure and none was written within the interval.
        public func request(_ request: TransportRequest, didCompleteWith result: Result<TransportResponse, TransportError>) {
            guard fails(result) else { return }
            let now = elapsed()
            let number: Int? = state.withLock { state in
                if let last = state.lastWrite, now - last < minimumInterval {
                    state.notWritten += 1
                    return nil
                }
                state.lastWrite = now
                state.written += 1
                return state.written
            }
            guard let number else { return }
            // What the recorder holds now (the failed attempt included), written off this thread.
            let archive = recorder.archive
            let stamp = Self.stamp(Date())
            queue.async { [self] in write(archive, named: "brick-failure-\(stamp)-\(number).har") }
        }

        /// Returns once every file decided so far is written (or failed).
        package func waitUntilWritten() {
            queue.sync {}
        }

        private func write(_ archive: HARArchive, named name: String) {
            let path = directory + "/" + name
            do {
                try archive.write(to: path)
                try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
                removeOldFiles()
            } catch {
                state.withLock { $0.lastError = error }
            }
        }

        /// Removes this writer's oldest files past `keepingFiles` (names sort by date).
        private func removeOldFiles() {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
            let own = names.filter { $0.hasPrefix("brick-failure-") && $0.hasSuffix(".har") }.sorted()
            for name in own.dropLast(keepingFiles) {
                try? FileManager.default.removeItem(atPath: directory + "/" + name)
            }
        }

        /// `20261129T144012.123Z`: sorts as it happened, and fits in a file name.
        static func stamp(_ date: Date) -> String {
            date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
                .filter { $0 != "-" && $0 != ":" }
        }
    }
}
