internal import CCurl
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// Owns one libcurl easy handle (`CURL*`), its error buffer, its parsed URL, its header list and a
/// record of the per-transfer options it holds.
///
/// Not `Sendable`: an easy handle is used only by the thread holding the driver's lease, one thread
/// at a time (libcurl-thread(3) allows a handle to move between threads, never to be shared).
final class EasyHandle {
    let raw: UnsafeMutableRawPointer
    let errorBuffer: UnsafeMutablePointer<CChar>
    /// The transfer running on this handle (an unretained `Transfer`), or `nil` between transfers.
    /// Every callback-data option and `CURLOPT_PRIVATE` point at this cell, set once per handle,
    /// so a new transfer writes the cell instead of setting six options.
    let transferCell: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    /// The request URL, parsed (a `CURLU`, given to the handle once as `CURLOPT_CURLU`). libcurl
    /// copies a parsed URL at the start of each transfer; given a string (`CURLOPT_URL`) it parses
    /// it and rebuilds it again every time. The handle parses a URL only when it differs from its
    /// previous transfer's: about 11k instructions less per request to a repeated URL (a fifth of
    /// what libcurl spends on a small GET), about 4k less when the URL changes.
    private let parsedURL: OpaquePointer
    private var headerList: UnsafeMutablePointer<curl_slist>?
    /// The response header block of the running transfer's current hop, in a buffer the handle
    /// keeps from one transfer to the next (no allocation per request).
    @exclusivity(unchecked) var headerBlock = HeaderBlock()
    /// Where a small response body accumulates (``BodyAccumulator``), kept from one transfer to
    /// the next.
    let bodyScratch = UnsafeMutableRawPointer.allocate(byteCount: BodyAccumulator.copyThreshold, alignment: 16)
    /// The per-transfer options as last set by ``apply(_:)``, valid while ``holdsApplied``: not
    /// before the first transfer, nor after a failed call, when nothing may be assumed.
    @exclusivity(unchecked) private var applied = TransferOptions(
        url: "",
        timeoutMilliseconds: 0,
        maxFileSize: 0,
        pipeWait: false,
        proxy: nil,
        freshConnect: false,
        maxConnectionAge: 0,
        noProgress: true,
        method: Method(post: false, postFieldSize: -1, noBody: false),
        headerLines: []
    )
    @exclusivity(unchecked) private var holdsApplied = false

    init?() {
        guard let parsedURL = curl_url() else { return nil }
        guard let raw = curl_easy_init() else {
            curl_url_cleanup(parsedURL)
            return nil
        }
        self.raw = raw
        self.parsedURL = parsedURL
        let size = Int(ccurl_error_size())
        self.errorBuffer = .allocate(capacity: size)
        self.errorBuffer.initialize(repeating: 0, count: size)
        self.transferCell = .allocate(capacity: 1)
        self.transferCell.initialize(to: nil)
        // libcurl only reads the parsed URL, at the start of each transfer; ``apply(_:)`` changes
        // it only between transfers, as CURLOPT_CURLU(3) allows. (A libcurl older than 7.63 has no
        // such option: no handle then, rather than transfers that fail with "no URL set".)
        guard ccurl_easy_setopt_ptr(raw, CURLOPT_CURLU, UnsafeRawPointer(parsedURL)) == CURLE_OK else { return nil }
    }

    deinit {
        curl_easy_cleanup(raw)
        curl_url_cleanup(parsedURL)
        if let headerList { curl_slist_free_all(headerList) }
        errorBuffer.deallocate()
        transferCell.deallocate()
        headerBlock.deallocate()
        bodyScratch.deallocate()
    }

    // MARK: - Per-transfer options

    /// Everything a transfer sets on the handle beyond the options constant for the transport.
    /// Each field has a value for every transfer (a default when unused), so no setting of an
    /// earlier request can carry over to the next one (the CVE-2022-32221 class of bug).
    struct TransferOptions: Equatable {
        var url: String
        var timeoutMilliseconds: Int
        var maxFileSize: Int64
        var pipeWait: Bool
        var proxy: UnsafeRawPointer?
        var freshConnect: Bool
        var maxConnectionAge: Int
        var noProgress: Bool
        var method: Method
        var headerLines: [String]
    }

    /// How the request method is expressed to libcurl. Set as one unit: `CURLOPT_HTTPGET`,
    /// `CURLOPT_POST` and `CURLOPT_NOBODY` each reset parts of the others.
    struct Method: Equatable {
        /// `CURLOPT_POST` (with ``postFieldSize``) rather than `CURLOPT_HTTPGET`.
        var post: Bool
        /// `CURLOPT_POSTFIELDSIZE_LARGE`: the body's length, or -1 for none.
        var postFieldSize: Int64
        /// `CURLOPT_NOBODY`: a `HEAD` request.
        var noBody: Bool
        /// `CURLOPT_CUSTOMREQUEST`, or `nil` when the method needs none.
        var customRequest: String?
    }

    /// Sets the options of `options` that differ from what the handle holds: all of them on its
    /// first transfer, usually only the URL afterwards. (`curl_easy_setopt` copies strings and
    /// rebuilds state on each call, ~100 instructions each; libcurl never changes a set option
    /// itself, so what was set is what the handle holds.)
    ///
    /// - Returns: `nil` when libcurl accepted every option; otherwise why not: its URL parser
    /// refused the URL (``TransportError/Kind/invalidRequest``), or it ran out of memory.
    func apply(_ options: borrowing TransferOptions) -> TransportError? {
        let all = !holdsApplied
        holdsApplied = false
        var refused = false
        var urlRefusal: CURLUcode?
        /// Sets one option with `set` unless the handle already holds `wanted`.
        func update<Value: Equatable>(_ held: inout Value, _ wanted: Value, _ set: (Value) -> Bool) {
            if !all && held == wanted { return }
            held = wanted
            if !set(wanted) { refused = true }
        }
        update(&applied.url, options.url) { url in
            // The same checks libcurl makes of a CURLOPT_URL string (user information refused, as
            // URLValidator does); a failed parse leaves the previous URL in place.
            let code = curl_url_set(parsedURL, CURLUPART_URL, url, UInt32(CURLU_DISALLOW_USER))
            if code != CURLUE_OK { urlRefusal = code }
            return code == CURLUE_OK
        }
        update(&applied.timeoutMilliseconds, options.timeoutMilliseconds) { set(CURLOPT_TIMEOUT_MS, $0) }
        update(&applied.maxFileSize, options.maxFileSize) { set(CURLOPT_MAXFILESIZE_LARGE, offset: $0) }
        update(&applied.pipeWait, options.pipeWait) { set(CURLOPT_PIPEWAIT, $0) }
        update(&applied.proxy, options.proxy) { set(CURLOPT_PROXY, pointer: $0) }
        update(&applied.freshConnect, options.freshConnect) { set(CURLOPT_FRESH_CONNECT, $0) }
        update(&applied.maxConnectionAge, options.maxConnectionAge) { set(CURLOPT_MAXLIFETIME_CONN, $0) }
        update(&applied.noProgress, options.noProgress) { set(CURLOPT_NOPROGRESS, $0) }
        update(&applied.method, options.method) { method in
            // NOBODY first (true turns the method into HEAD, false turns HEAD back into GET), then
            // the method, then NOBODY for HEAD, then CUSTOMREQUEST (NULL when none is needed).
            var accepted = set(CURLOPT_NOBODY, false)
            accepted = (method.post ? set(CURLOPT_POST, true) : set(CURLOPT_HTTPGET, true)) && accepted
            accepted = set(CURLOPT_POSTFIELDSIZE_LARGE, offset: method.postFieldSize) && accepted
            if method.noBody { accepted = set(CURLOPT_NOBODY, true) && accepted }
            if let custom = method.customRequest { return set(CURLOPT_CUSTOMREQUEST, custom) && accepted }
            return set(CURLOPT_CUSTOMREQUEST, pointer: nil) && accepted
        }
        update(&applied.headerLines, options.headerLines) { setHeaders($0) }
        holdsApplied = !refused
        if let urlRefusal {
            let reason = curl_url_strerror(urlRefusal).map { String(cString: $0) } ?? "code \(urlRefusal.rawValue)"
            return TransportError(.invalidRequest, message: "invalid URL: libcurl refused it (\(reason))")
        }
        return refused ? TransportError(.other, message: "libcurl refused a transfer option (out of memory)") : nil
    }

    // Each setter returns whether libcurl accepted the value.

    @discardableResult
    func set(_ option: CURLoption, _ value: Int) -> Bool {
        precondition(option.rawValue < 10_000, "option \(option.rawValue) does not take a long")
        return ccurl_easy_setopt_long(raw, option, value) == CURLE_OK
    }

    @discardableResult
    func set(_ option: CURLoption, _ value: Bool) -> Bool {
        set(option, value ? 1 : 0)
    }

    @discardableResult
    func set(_ option: CURLoption, offset value: Int64) -> Bool {
        precondition(
            option.rawValue >= 30_000 && option.rawValue < 40_000,
            "option \(option.rawValue) does not take curl_off_t"
        )
        return ccurl_easy_setopt_off(raw, option, curl_off_t(value)) == CURLE_OK
    }

    /// String options are copied by libcurl (since 7.17), so the pointer may die after the call.
    @discardableResult
    func set(_ option: CURLoption, _ value: String) -> Bool {
        precondition(
            option.rawValue >= 10_000 && option.rawValue < 20_000,
            "option \(option.rawValue) does not take a pointer"
        )
        return value.withCString { ccurl_easy_setopt_ptr(raw, option, $0) } == CURLE_OK
    }

    @discardableResult
    func set(_ option: CURLoption, pointer value: UnsafeRawPointer?) -> Bool {
        precondition(
            option.rawValue >= 10_000 && option.rawValue < 20_000,
            "option \(option.rawValue) does not take a pointer"
        )
        return ccurl_easy_setopt_ptr(raw, option, value) == CURLE_OK
    }

    func set(_ option: CURLoption, callback: ccurl_data_callback) {
        _ = ccurl_easy_setopt_data_callback(raw, option, callback)
    }

    /// Sets the request's header lines (none: `NULL`); the list lives until the next call or deinit.
    /// Returns `false`, leaving no list set, when libcurl runs out of memory.
    private func setHeaders(_ lines: [String]) -> Bool {
        var list: UnsafeMutablePointer<curl_slist>? = nil
        var complete = true
        for line in lines {
            guard let longer = curl_slist_append(list, line) else {
                complete = false
                break
            }
            list = longer
        }
        if !complete, let partial = list {
            curl_slist_free_all(partial)
            list = nil
        }
        let accepted = set(CURLOPT_HTTPHEADER, pointer: list.map { UnsafeRawPointer($0) })
        if let headerList { curl_slist_free_all(headerList) }
        headerList = list
        return complete && accepted
    }

    // MARK: - Info

    /// Whether the current transfer was made to open a connection of its own
    /// (`CURLOPT_FRESH_CONNECT`) rather than ride one it could reuse.
    var requiresFreshConnection: Bool { applied.freshConnect }

    /// Whether any byte of the current request has gone out (`CURLINFO_REQUEST_SIZE`): the
    /// server may then have acted on it (``TransportError/requestBytesSent``).
    var sentRequestBytes: Bool { long(CURLINFO_REQUEST_SIZE) > 0 }

    func long(_ info: CURLINFO) -> Int {
        var value = 0
        _ = ccurl_easy_getinfo_long(raw, info, &value)
        return value
    }

    func offset(_ info: CURLINFO) -> Int64 {
        var value: curl_off_t = 0
        _ = ccurl_easy_getinfo_off(raw, info, &value)
        return Int64(value)
    }

    func string(_ info: CURLINFO) -> String? {
        var value: UnsafeMutablePointer<CChar>? = nil
        _ = ccurl_easy_getinfo_string(raw, info, &value)
        return value.map { String(cString: $0) }
    }

    var errorMessage: String {
        String(cString: errorBuffer)
    }
}

/// A growable byte buffer for a response's header block: appending each line to an array costs
/// several times the copy itself, so the lines go here and ``bytes`` makes the array once.
struct HeaderBlock {
    private var storage = UnsafeMutablePointer<UInt8>.allocate(capacity: 512)
    private var capacity = 512
    private(set) var count = 0

    /// Appends one header line.
    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        if count + bytes.count > capacity {
            let larger = max(capacity * 2, count + bytes.count)
            let fresh = UnsafeMutablePointer<UInt8>.allocate(capacity: larger)
            fresh.update(from: storage, count: count)
            storage.deallocate()
            storage = fresh
            capacity = larger
        }
        (storage + count).update(from: source, count: bytes.count)
        count += bytes.count
    }

    /// Empties the block, keeping its buffer unless an unusually large block grew it.
    mutating func removeAll() {
        count = 0
        if capacity > 16 * 1024 {
            storage.deallocate()
            storage = .allocate(capacity: 512)
            capacity = 512
        }
    }

    /// The block as an array: `Name: value\r\n` lines, status line excluded.
    var bytes: [UInt8] { Array(UnsafeBufferPointer(start: storage, count: count)) }

    /// Frees the buffer (the owner's `deinit`).
    func deallocate() { storage.deallocate() }
}
