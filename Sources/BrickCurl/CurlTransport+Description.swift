import FoundationEssentials
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

extension CurlTransport {
    /// The `curl` command line that sends the same request with the same settings, for debugging
    /// and for reproducing a request by hand.
    ///
    /// The command carries the exact header lines the transport gives libcurl, the body (inline
    /// for memory segments, read from disk for files), and every limit and TLS setting in force.
    /// It includes header values: treat it as sensitive.
    ///
    /// - Parameter request: The rendered request.
    /// - Returns: A shell command (POSIX `sh`).
    public func cURLDescription(for request: TransportRequest) -> String {
        var arguments: [String] = ["curl"]
        let configuration = self.configuration
        switch request.method {
        case .get where request.body == nil: break
        case .head where request.body == nil: arguments.append("--head")
        case .post where request.body != nil: break
        default: arguments += ["-X", request.method.rawValue]
        }
        arguments.append(Self.quote(request.urlString))
        if request.headerFields[.userAgent] == nil {
            arguments += ["-A", Self.quote(configuration.userAgent ?? "")]
        }
        if let lines = try? CurlHeaderLines(request).lines {
            for line in lines { arguments += ["-H", Self.quote(line)] }
        }
        var prefix = ""
        if let body = request.body {
            if body.segments.count == 1, case .file(let path) = body.segments[0] {
                arguments += ["--data-binary", Self.quote("@" + path)]
            } else if body.segments.count == 1, case .data(let data) = body.segments[0] {
                arguments += ["--data-binary", Self.quote(data)]
            } else {
                let parts = body.segments.map { segment -> String in
                    switch segment {
                    case .data(let data): return "printf '%s' \(Self.quote(data))"
                    case .file(let path): return "cat \(Self.quote(path))"
                    case .stream: return "printf '%s' '<a streamed body, not shown>'"
                    }
                }
                prefix = "{ " + parts.joined(separator: "; ") + "; } | "
                arguments += ["--data-binary", "@-"]
            }
        } else if request.method == .post {
            arguments += ["--data-binary", "''"]
        }
        arguments += [
            "--proto", "=http,https", "--tlsv1.2", "--connect-timeout", Self.seconds(configuration.connectTimeout),
        ]
        if let timeout = request.options.timeout ?? configuration.requestTimeout {
            arguments += ["--max-time", Self.seconds(timeout)]
        }
        if let idle = configuration.idleTimeout {
            // The command line's nearest equivalent of the idle timeout (whole seconds).
            let seconds = max(1, idle.milliseconds() / 1000)
            let rate = max(1, configuration.idleMinimumBytes / seconds)
            arguments += ["--speed-limit", String(rate), "--speed-time", String(seconds)]
        }
        arguments += ["--max-filesize", String(request.options.maxResponseSize ?? configuration.maxResponseSize)]
        if configuration.automaticDecompression {
            arguments += ["-H", Self.quote("Accept-Encoding: " + CurlGlobal.supportedEncodings), "--compressed"]
        }
        if request.options.followsRedirects && configuration.redirects.maxRedirects > 0 {
            arguments += [
                "--location", "--max-redirs", String(configuration.redirects.maxRedirects), "--proto-redir",
                configuration.redirects.allowsHTTPSToHTTP || !request.isSecure ? "=http,https" : "=https",
            ]
        }
        if configuration.httpVersion == .http1_1 { arguments.append("--http1.1") }
        let tls = configuration.tls
        if let caFile = tls.caFile { arguments += ["--cacert", Self.quote(caFile)] }
        if let caPath = tls.caPath { arguments += ["--capath", Self.quote(caPath)] }
        if let client = tls.clientCertificate {
            arguments += ["--cert", Self.quote(client.certificatePath), "--key", Self.quote(client.privateKeyPath)]
            if client.privateKeyPassword != nil { arguments += ["--pass", "'…'"] }
        }
        if !tls.pinnedPublicKeys.isEmpty {
            arguments += ["--pinnedpubkey", Self.quote(tls.pinnedPublicKeys.joined(separator: ";"))]
        }
        let proxy = ResolvedProxy(configuration.proxy, environment: ProcessInfo.processInfo.environment)
        let proxyURL = request.isSecure ? proxy.https : proxy.http
        arguments += ["--proxy", Self.quote(proxyURL)]
        if !proxy.noProxy.isEmpty { arguments += ["--noproxy", Self.quote(proxy.noProxy)] }
        if case .file(let path) = request.options.destination { arguments += ["-o", Self.quote(path)] }
        return prefix + arguments.joined(separator: " ")
    }

    static func quote(_ text: String) -> String {
        "'" + text.replacing("'", with: "'\\''") + "'"
    }

    /// Printable UTF-8 goes in single quotes; anything else as `$'\xHH'`.
    static func quote(_ data: Data) -> String {
        if let text = String(data: data, encoding: .utf8),
            text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F || $0 == "\n" || $0 == "\t" })
        {
            return quote(text)
        }
        return "$'" + data.map { "\\x" + $0.zeroPadded(width: 2, radix: 16) }.joined() + "'"
    }

    private static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.milliseconds()
        let (seconds, fraction) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        return fraction == 0 ? String(seconds) : "\(seconds)." + fraction.zeroPadded(width: 3)
    }
}
