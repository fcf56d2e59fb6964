import BrickOfflineCore
import Foundation
import NIOSSL
import PostgresNIO

extension PostgresOfflineStore {
    /// A client configuration from the variables `libpq` reads: `PGHOST` (a host name, or a
    /// directory holding the server's Unix socket), `PGPORT` (5432), `PGUSER`, `PGPASSWORD`,
    /// `PGDATABASE` (the user's name), `PGSSLMODE` and `PGSSLROOTCERT`; or, when `DATABASE_URL` is
    /// set, from that URL (see `clientConfiguration(url:)`).
    ///
    /// `PGSSLMODE`: `disable`; `prefer` (the default: TLS when the server offers it); `require`,
    /// `verify-ca` and `verify-full` all require TLS **with the certificate verified** against the
    /// system's roots or `PGSSLROOTCERT` — this library never turns verification off.
    ///
    /// - Throws: ``OfflineStoreError`` (kind `io`) naming the variable that is missing or wrong,
    ///   never its value.
    public static func clientConfiguration(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> PostgresClient.Configuration {
        if let url = environment["DATABASE_URL"], !url.isEmpty {
            return try clientConfiguration(url: url, environment: environment)
        }
        guard let user = environment["PGUSER"] ?? environment["USER"], !user.isEmpty else {
            throw OfflineStoreError(.io, message: "PGUSER is not set")
        }
        let host = environment["PGHOST"].flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1"
        let port = try environment["PGPORT"].map { text -> Int in
            guard let port = Int(text), (1...65535).contains(port) else {
                throw OfflineStoreError(.io, message: "PGPORT is not a port number")
            }
            return port
        } ?? 5432
        return try configuration(
            host: host,
            port: port,
            user: user,
            password: environment["PGPASSWORD"],
            database: environment["PGDATABASE"].flatMap { $0.isEmpty ? nil : $0 } ?? user,
            sslMode: environment["PGSSLMODE"],
            rootCertificate: environment["PGSSLROOTCERT"]
        )
    }

    /// A client configuration from a URL: `postgres://user:password@host:port/database?sslmode=…`
    /// (`postgresql://` too; the password percent-encoded). `sslmode` as for
    /// ``clientConfiguration(environment:)``.
    ///
    /// - Throws: ``OfflineStoreError`` (kind `io`) saying what is wrong, never echoing the URL
    ///   (it holds the password).
    public static func clientConfiguration(
        url: String,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> PostgresClient.Configuration {
        guard let components = URLComponents(string: url),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw OfflineStoreError(.io, message: "the database URL is not a postgres:// URL")
        }
        guard let user = components.percentEncodedUser.flatMap({ $0.removingPercentEncoding }), !user.isEmpty else {
            throw OfflineStoreError(.io, message: "the database URL names no user")
        }
        let database = String(components.path.drop(while: { $0 == "/" })).removingPercentEncoding
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") },
            uniquingKeysWith: { _, last in last }
        )
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else {
            // As PGPORT is checked: the same rule whichever way the port is given.
            throw OfflineStoreError(.io, message: "the database URL's port is not a port number (1 to 65535)")
        }
        return try configuration(
            host: components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1",
            port: port,
            user: user,
            password: components.percentEncodedPassword.flatMap { $0.removingPercentEncoding },
            database: database.flatMap { $0.isEmpty ? nil : $0 } ?? user,
            sslMode: query["sslmode"] ?? environment["PGSSLMODE"],
            rootCertificate: query["sslrootcert"] ?? environment["PGSSLROOTCERT"]
        )
    }

    private static func configuration(
        host: String,
        port: Int,
        user: String,
        password: String?,
        database: String,
        sslMode: String?,
        rootCertificate: String?
    ) throws -> PostgresClient.Configuration {
        if host.hasPrefix("/") {
            // A socket directory, as libpq takes it: the socket is `.s.PGSQL.<port>` inside.
            return PostgresClient.Configuration(
                unixSocketPath: "\(host)/.s.PGSQL.\(port)",
                username: user,
                password: password,
                database: database
            )
        }
        var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        if let rootCertificate, !rootCertificate.isEmpty {
            tlsConfiguration.trustRoots = .file(rootCertificate)
        }
        let tls: PostgresClient.Configuration.TLS
        switch sslMode ?? "prefer" {
        case "disable": tls = .disable
        case "prefer", "allow": tls = .prefer(tlsConfiguration)
        case "require", "verify-ca", "verify-full": tls = .require(tlsConfiguration)
        default:
            throw OfflineStoreError(.io, message: "sslmode must be disable, prefer, require, verify-ca or verify-full")
        }
        return PostgresClient.Configuration(
            host: host,
            port: port,
            username: user,
            password: password,
            database: database,
            tls: tls
        )
    }
}
