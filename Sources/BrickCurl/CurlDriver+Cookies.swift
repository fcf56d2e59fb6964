internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// The driver's cookie facet: reading and clearing the shared cookie store, on the driver's thread.
extension CurlDriver {
    enum CookieOperation {
        /// The cookies as libcurl's Netscape-format lines.
        case list(@Sendable ([String]) -> Void)
        case removeAll(@Sendable () -> Void)
    }

    func run(_ operation: CookieOperation) {
        if cookieHandle == nil, let cookieShare, let easy = EasyHandle() {
            easy.set(CURLOPT_SHARE, pointer: cookieShare)
            easy.set(CURLOPT_COOKIEFILE, "")
            cookieHandle = easy
        }
        switch operation {
        case .list(let answer):
            var lines: [String] = []
            var pointer: UnsafeMutableRawPointer?
            if let easy = cookieHandle, ccurl_easy_getinfo_ptr(easy.raw, CURLINFO_COOKIELIST, &pointer) == CURLE_OK {
                let list = pointer?.assumingMemoryBound(to: curl_slist.self)
                var node = list
                while let current = node {
                    if let data = current.pointee.data { lines.append(String(cString: data)) }
                    node = current.pointee.next
                }
                curl_slist_free_all(list)
            }
            answer(lines)
        case .removeAll(let done):
            cookieHandle?.set(CURLOPT_COOKIELIST, "ALL")
            done()
        }
    }
}
