import BrickRequest
import BrickTestSupport
import Foundation
import Synchronization
import Testing

/// A real nginx on loopback with a certificate authority, a server certificate and a client
/// certificate generated at run time: `https` with HTTP/2 (ALPN), `https` requiring a client
/// certificate, and plain `http`. Started once for the test process; a watchdog shell stops it when
/// the test process exits.
final class NginxFixture: Sendable {
    let directory: String
    let httpsPort: Int
    let mutualTLSPort: Int
    let httpPort: Int

    var caFile: String { directory + "/ca.pem" }
    var caDirectory: String { directory + "/ca-dir" }
    var clientCertificate: String { directory + "/client.pem" }
    var clientKey: String { directory + "/client-key.pem" }
    var serverCertificate: String { directory + "/server.pem" }

    /// Pipes kept open for the life of the test process (their closing stops the watchdogs).
    private static let lifelines = Lock<[Int32]>([])

    static let shared: Result<NginxFixture, FixtureError> = Result { try NginxFixture() }.mapError {
        $0 as? FixtureError ?? FixtureError(message: "\($0)")
    }

    struct FixtureError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    private init() throws {
        guard
            let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            throw FixtureError(
                message: "nginx is not installed: run `apt-get install nginx openssl` (see README, Prerequisites)"
            )
        }
        directory = NSTemporaryDirectory() + "brick-nginx-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory + "/www", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/tmp", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/ca-dir", withIntermediateDirectories: true)
        httpsPort = try Self.freePort()
        mutualTLSPort = try Self.freePort()
        httpPort = try Self.freePort()
        try Data(repeating: UInt8(ascii: "x"), count: 128).write(to: URL(fileURLWithPath: directory + "/www/small"))
        let d = directory
        try Self.shell(
            """
            set -e
            cd '\(d)'
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca-key.pem -out ca.pem \
              -days 2 -subj '/CN=BrickRequest Test CA' -addext 'basicConstraints=critical,CA:TRUE' \
              -addext 'keyUsage=critical,keyCertSign,cRLSign'
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server-key.pem -out server.csr -subj '/CN=localhost'
            printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile server.ext
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client-key.pem -out client.csr -subj '/CN=brick-client'
            printf 'extendedKeyUsage=clientAuth\\n' > client.ext
            openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out client.pem -days 2 -extfile client.ext
            cp ca.pem ca-dir/ && openssl rehash ca-dir
            chmod 755 . www && chmod 644 www/small server.pem server-key.pem ca.pem
            """
        )
        let config = """
            daemon off;
            master_process on;
            worker_processes 1;
            pid \(d)/nginx.pid;
            error_log \(d)/error.log warn;
            events { worker_connections 1024; }
            http {
                access_log off;
                default_type application/octet-stream;
                client_body_temp_path \(d)/tmp/body;
                proxy_temp_path \(d)/tmp/proxy;
                fastcgi_temp_path \(d)/tmp/fastcgi;
                uwsgi_temp_path \(d)/tmp/uwsgi;
                scgi_temp_path \(d)/tmp/scgi;
                keepalive_requests 100000;
                server {
                    listen 127.0.0.1:\(httpsPort) ssl http2;
                    ssl_certificate \(d)/server.pem;
                    ssl_certificate_key \(d)/server-key.pem;
                    ssl_protocols TLSv1.2 TLSv1.3;
                    http2_max_concurrent_streams 256;
                    root \(d)/www;
                    location = /to-http { return 302 http://127.0.0.1:\(httpPort)/small; }
                    location / { try_files $uri =404; }
                }
                server {
                    listen 127.0.0.1:\(mutualTLSPort) ssl;
                    ssl_certificate \(d)/server.pem;
                    ssl_certificate_key \(d)/server-key.pem;
                    ssl_client_certificate \(d)/ca.pem;
                    ssl_verify_client on;
                    root \(d)/www;
                    location / { try_files $uri =404; }
                }
                server {
                    listen 127.0.0.1:\(httpPort);
                    root \(d)/www;
                    location / { try_files $uri =404; }
                }
            }
            """
        try config.write(toFile: d + "/nginx.conf", atomically: true, encoding: .utf8)
        // The watchdog stops nginx when this test process goes away, however it ends: it reads a
        // pipe whose write end only this process holds, and the read returns when the process dies.
        var lifeline: [Int32] = [0, 0]
        guard pipe(&lifeline) == 0 else { throw FixtureError(message: "pipe failed") }
        _ = fcntl(lifeline[1], F_SETFD, FD_CLOEXEC)
        _ = try Subprocess.spawn(
            """
            '\(nginx)' -p '\(d)' -c '\(d)/nginx.conf' -e '\(d)/error.log' </dev/null >'\(d)/nginx.out' 2>&1 &
            child=$!
            cat >/dev/null
            kill $child 2>/dev/null; sleep 0.2; rm -rf '\(d)'
            """,
            stdin: lifeline[0]
        )
        close(lifeline[0])
        // The write end stays open for the life of this process; when it dies, the watchdog's read ends.
        Self.lifelines.withLock { $0.append(lifeline[1]) }
        for _ in 0..<100 {
            if canConnect(httpsPort) && canConnect(mutualTLSPort) && canConnect(httpPort) { return }
            usleep(50_000)
        }
        let log = (try? String(contentsOfFile: d + "/error.log", encoding: .utf8)) ?? ""
        throw FixtureError(message: "nginx did not start: \(log)")
    }

    /// The SPKI pin (`sha256//…`) of the server certificate.
    func serverPin() throws -> String {
        let output = try Self.shell(
            "openssl x509 -in '\(serverCertificate)' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"
        )
        return "sha256//" + output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @discardableResult
    static func shell(_ script: String) throws -> String {
        do {
            return try Subprocess.runBlocking(script)
        } catch {
            throw FixtureError(message: "\(error)")
        }
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw FixtureError(message: "cannot bind a free port") }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
