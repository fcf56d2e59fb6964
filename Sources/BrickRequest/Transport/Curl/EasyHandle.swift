internal import CCurl

/// Owns one libcurl easy handle (`CURL*`), its error buffer and its header list.
///
/// Not `Sendable`: an easy handle is used only by the thread holding the driver's lease, one thread
/// at a time (libcurl-thread(3) allows a handle to move between threads, never to be shared).
final class EasyHandle {
    let raw: UnsafeMutableRawPointer
    let errorBuffer: UnsafeMutablePointer<CChar>
    private var headerList: UnsafeMutablePointer<curl_slist>?

    init?() {
        guard let raw = curl_easy_init() else { return nil }
        self.raw = raw
        let size = Int(ccurl_error_size())
        self.errorBuffer = .allocate(capacity: size)
        self.errorBuffer.initialize(repeating: 0, count: size)
    }

    deinit {
        curl_easy_cleanup(raw)
        if let headerList { curl_slist_free_all(headerList) }
        errorBuffer.deallocate()
    }

    // MARK: - Options (the option's number encodes its argument type; check it)

    func set(_ option: CURLoption, _ value: Int) {
        precondition(option.rawValue < 10_000, "option \(option.rawValue) does not take a long")
        _ = ccurl_easy_setopt_long(raw, option, value)
    }

    func set(_ option: CURLoption, _ value: Bool) {
        set(option, value ? 1 : 0)
    }

    func set(_ option: CURLoption, offset value: Int64) {
        precondition(
            option.rawValue >= 30_000 && option.rawValue < 40_000,
            "option \(option.rawValue) does not take curl_off_t"
        )
        _ = ccurl_easy_setopt_off(raw, option, curl_off_t(value))
    }

    /// String options are copied by libcurl (since 7.17), so the pointer may die after the call.
    func set(_ option: CURLoption, _ value: String) {
        precondition(
            option.rawValue >= 10_000 && option.rawValue < 20_000,
            "option \(option.rawValue) does not take a pointer"
        )
        _ = value.withCString { ccurl_easy_setopt_ptr(raw, option, $0) }
    }

    func set(_ option: CURLoption, pointer value: UnsafeRawPointer?) {
        precondition(
            option.rawValue >= 10_000 && option.rawValue < 20_000,
            "option \(option.rawValue) does not take a pointer"
        )
        _ = ccurl_easy_setopt_ptr(raw, option, value)
    }

    func set(_ option: CURLoption, callback: ccurl_data_callback) {
        _ = ccurl_easy_setopt_data_callback(raw, option, callback)
    }

    /// Sets the request's header lines (none: `NULL`); the list lives until the next call or deinit.
    func setHeaders(_ lines: [String]) {
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for line in lines {
            list = curl_slist_append(list, line)
        }
        set(CURLOPT_HTTPHEADER, pointer: list.map { UnsafeRawPointer($0) })
        if let headerList { curl_slist_free_all(headerList) }
        headerList = list
    }

    // MARK: - Info

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
