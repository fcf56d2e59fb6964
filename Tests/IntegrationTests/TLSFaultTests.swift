import BrickRequest
import BrickTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// OpenSSL peers with faulty TLS, started by the test: an expired certificate, a certificate for
/// another host name, servers that offer only TLS 1.0 or only TLS 1.1, and a peer that hangs up in
/// the middle of the handshake.
final class TLSFaultPeers: Sendable {
    let directory: String
    let caFile: String
    let expiredPort: Int
    let wrongHostPort: Int
    let tls10Port: Int
    let tls11Port: Int
    /// The `s_server` processes, killed when the peers go.
    private let servers: [Int32]

    init() throws {
        directory = NSTemporaryDirectory() + "brick-tls-faults-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        caFile = directory + "/ca.pem"
        let d = directory
        // `openssl ca` signs with explicit dates: the only way OpenSSL 3.0 makes an expired certificate.
        try NginxFixture.shell(
            """
            set -e
            cd '\(d)'
            printf '[ca]\\ndefault_ca=d\\n[d]\\ndatabase=index.txt\\nnew_certs_dir=.\\ncertificate=ca.pem\\nprivate_key=ca-key.pem\\nserial=serial\\ndefault_md=sha256\\npolicy=p\\ncopy_extensions=copy\\nunique_subject=no\\n[p]\\ncommonName=supplied\\n' > ca.cnf
            touch index.txt && echo 01 > serial
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca-key.pem -out ca.pem \\
              -days 2 -subj '/CN=BrickRequest Fault CA' -addext 'basicConstraints=critical,CA:TRUE' \\
              -addext 'keyUsage=critical,keyCertSign,cRLSign'
            for name in expired other good; do
              host=localhost; [ $name = other ] && host=other.example
              san="subjectAltName=DNS:$host"; [ $name != other ] && san="$san,IP:127.0.0.1"
              openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $name-key.pem -out $name.csr \\
                -subj "/CN=$host" -addext "$san"
            done
            openssl ca -batch -config ca.cnf -startdate 20200101000000Z -enddate 20200102000000Z -in expired.csr -out expired.pem
            openssl ca -batch -config ca.cnf -days 2 -in other.csr -out other.pem
            openssl ca -batch -config ca.cnf -days 2 -in good.csr -out good.pem
            """
        )
        expiredPort = try NginxFixture.freePort()
        wrongHostPort = try NginxFixture.freePort()
        tls10Port = try NginxFixture.freePort()
        tls11Port = try NginxFixture.freePort()
        var started: [Int32] = []
        do {
            for (port, name, options) in [
                (expiredPort, "expired", [String]()), (wrongHostPort, "other", []),
                // Old protocols need the lowest security level to be offered at all by OpenSSL 3.
                (tls10Port, "good", ["-tls1", "-cipher", "DEFAULT:@SECLEVEL=0"]),
                (tls11Port, "good", ["-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"]),
            ] {
                started.append(try Self.serve(port, name, options, in: directory))
            }
        } catch {
            for pid in started { kill(pid, SIGKILL) }
            throw error
        }
        servers = started
        let deadline = Date().addingTimeInterval(10)
        while ![expiredPort, wrongHostPort, tls10Port, tls11Port].allSatisfy(canConnect) {
            guard Date() < deadline else { throw NginxFixture.FixtureError(message: "openssl s_server did not start") }
            usleep(20_000)
        }
    }

    /// Starts `openssl s_server` in the background (through the shell, so that it is not this
    /// process's child: Foundation's `Process.waitUntilExit` hangs off the main thread here).
    private static func serve(_ port: Int, _ name: String, _ options: [String], in directory: String) throws -> Int32 {
        let output = try NginxFixture.shell(
            "openssl s_server -accept 127.0.0.1:\(port) -cert '\(directory)/\(name).pem' -key '\(directory)/\(name)-key.pem' "
                + "-www -quiet \(options.map { "'\($0)'" }.joined(separator: " ")) >/dev/null 2>&1 </dev/null & echo $!"
        )
        guard let pid = Int32(output.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw NginxFixture.FixtureError(message: "openssl s_server did not start: \(output)")
        }
        return pid
    }

    deinit {
        // SIGKILL: a process started from a thread of this one inherits its blocked signals (Swift's
        // and Dispatch's threads block SIGTERM), so SIGTERM would wait forever.
        for pid in servers { kill(pid, SIGKILL) }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A TCP listener that reads the client's first bytes (its ClientHello) and closes the
/// connection: a peer that stops in the middle of the handshake. Counts the connections.
final class HandshakeDropper: Sendable {
    let port: Int
    private let listener: Int32
    private let counter = Counter()
    var accepted: Int { counter.value.load(ordering: .relaxed) }

    private final class Counter: Sendable {
        let value = Atomic(0)
    }

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        guard listen(listener, 16) == 0 else { throw NginxFixture.FixtureError(message: "cannot listen") }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        let (fd, count) = (listener, counter)
        Thread.detachNewThread {
            while true {
                let connection = accept(fd, nil, nil)
                if connection < 0 { return }  // the listener was closed
                count.value.add(1, ordering: .relaxed)
                var hello = [UInt8](repeating: 0, count: 4096)
                _ = read(connection, &hello, hello.count)
                close(connection)
            }
        }
    }

    deinit { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }
}

/// A GET of `/` that retries as the defaults do (5 times), to see that TLS failures are not retried.
private final class Probe: Component, GETRequestType, DataResponseType {
    let urlString: String
    let session: Session
    init(_ url: String, session: Session) {
        self.urlString = url
        self.session = session
        super.init()
    }
}

@Suite("TLS faults: each refused by default with an error that says which, none retried", .timeLimit(.minutes(2)))
struct TLSFaultTests {
    let peers: TLSFaultPeers

    /// The peers start (certificates, four `s_server`s, a wait for their ports) on a thread of
    /// their own, never on a cooperative one (PoolWatchdog found it holding one for seconds).
    init() async throws {
        peers = try await Subprocess.offPool { try TLSFaultPeers() }
    }

    /// The failure of a GET through a session trusting the peers' CA, with the default retries.
    private func failure(_ port: Int) async throws -> (BrickError, retries: Int) {
        var configuration = Session.Configuration()
        configuration.transport.tls.caFile = peers.caFile
        let session = Session(configuration: configuration)
        let response = await Probe("https://127.0.0.1:\(port)/", session: session).response()
        let error = try #require(response.error)
        return (error, response.retryCount)
    }

    @Test("an expired certificate: tls, 'certificate has expired', not retried")
    func expired() async throws {
        let (error, retries) = try await failure(peers.expiredPort)
        #expect(error.code == .tls)
        #expect(error.message.contains("certificate was refused: SSL certificate problem: certificate has expired"), "\(error.message)")
        #expect(retries == 0)
    }

    @Test("a certificate for another host name: tls, the name mismatch said, not retried")
    func wrongHost() async throws {
        let (error, retries) = try await failure(peers.wrongHostPort)
        #expect(error.code == .tls)
        #expect(error.message.contains("no alternative certificate subject name matches"), "\(error.message)")
        #expect(retries == 0)
    }

    @Test("a server offering only TLS 1.0 or only TLS 1.1: tls, the version said, not retried", arguments: ["1.0", "1.1"])
    func oldProtocol(version: String) async throws {
        let (error, retries) = try await failure(version == "1.0" ? peers.tls10Port : peers.tls11Port)
        #expect(error.code == .tls)
        #expect(error.message.contains("offers no TLS version this client accepts (TLS 1.2 or later)"), "\(error.message)")
        #expect(retries == 0)
    }

    @Test("a peer that hangs up mid-handshake: tls, the handshake named, not retried")
    func midHandshake() async throws {
        let dropper = try HandshakeDropper()
        let (error, retries) = try await failure(dropper.port)
        #expect(error.code == .tls)
        #expect(error.message.contains("closed the connection during the handshake"), "\(error.message)")
        #expect(retries == 0)
        #expect(dropper.accepted == 1)
    }
}
