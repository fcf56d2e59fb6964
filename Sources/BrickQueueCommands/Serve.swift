import ArgumentParser
import BrickOfflineCore
import BrickQueueConsole
import Foundation
import Hummingbird
import Logging

/// `serve`: the web console, on loopback unless a token guards it.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The web console: queues live, entries paged, dead letters retried, queues paused.",
        discussion: """
            Binds 127.0.0.1 by default. Any other address needs --token-file: every request then \
            carries the token (Authorization: Bearer TOKEN) or logs in once with it (an HttpOnly, \
            SameSite=Strict cookie). Stops on SIGINT or SIGTERM.
            """
    )
    @ParentCommand var root: BrickQueue

    @Option(help: "The address to bind.") var host = "127.0.0.1"
    @Option(help: "The port (0: any free one, printed).") var port = 8080
    @Option(help: ArgumentHelp("A file holding the console's token (required off loopback).", valueName: "path"))
    var tokenFile: String?

    static func isLoopback(_ host: String) -> Bool {
        host == "127.0.0.1" || host == "::1" || host == "localhost" || host.hasPrefix("127.")
    }

    func validate() throws {
        if tokenFile == nil && !Self.isLoopback(host) {
            throw ValidationError(
                "--host \(host) is not loopback: give --token-file PATH (a file holding a long random token), or serve on 127.0.0.1 and reach it through an SSH tunnel"
            )
        }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0…65535") }
    }

    func run() async throws {
        var token: String?
        if let tokenFile {
            guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
                throw Refusal("cannot read the token file \(tokenFile)")
            }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard trimmed.utf8.count >= 16 else {
                throw Refusal("the token in \(tokenFile) is shorter than 16 characters: use a long random one (openssl rand -hex 32)")
            }
            token = trimmed
        }
        let (host, port, guarded) = (self.host, self.port, token != nil)
        let tool = Tool.opener?.toolName ?? "brick-queue"
        let guardedToken = token
        // On SQLite, with its worker running, the console serves its pages read-only (a change
        // then says to use the worker's own console or stop it).
        var changing = true
        if let path = root.sqlitePath, let opener = Tool.opener, !opener.mayChange(root.location) {
            changing = false
            FileHandle.standardError.write(Data("\(tool): \(path) is in use by its worker: the console is read-only (changes: stop the worker, or use the console mounted in it)\n".utf8))
        }
        try await root.withStore(changing: changing) { store in
            let console = QueueConsole(
                store: store,
                token: guardedToken,
                // Without a token, only as the loopback address it is reached by (no DNS rebinding).
                allowedHosts: guardedToken == nil ? ["127.0.0.1", "localhost", "[::1]"] : nil
            )
            var logger = Logger(label: "brick-queue.console")
            logger.logLevel = .warning
            let router = Router()
            router.addRoutes(console.routes())
            let app = Application(
                router: router,
                configuration: .init(address: .hostname(host, port: port), serverName: "brick-queue"),
                onServerRunning: { channel in
                    let bound = channel.localAddress?.port ?? port
                    FileHandle.standardOutput.write(Data("\(tool): console at http://\(host.contains(":") ? "[\(host)]" : host):\(bound)/\(guarded ? " (token required)" : "")\n".utf8))
                },
                logger: logger
            )
            try await app.runService()
        }
    }
}
