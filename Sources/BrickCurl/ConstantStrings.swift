internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// C copies of the strings every transfer sets; freed when the driver stops.
struct ConstantStrings {
    let userAgent: UnsafeMutablePointer<CChar>?
    let protocols: UnsafeMutablePointer<CChar>
    let acceptEncoding: UnsafeMutablePointer<CChar>
    let httpProxy: UnsafeMutablePointer<CChar>
    let httpsProxy: UnsafeMutablePointer<CChar>
    let noProxy: UnsafeMutablePointer<CChar>
    /// ``CurlTransport/Configuration/hostOverrides`` as `CURLOPT_RESOLVE` entries, or `nil`.
    let resolveList: UnsafeMutablePointer<curl_slist>?

    init(proxy: ResolvedProxy, userAgent: String?, hostOverrides: [CurlTransport.HostOverride]) {
        self.userAgent = userAgent.map { strdup($0) }
        protocols = strdup("http,https")
        // An explicit list: "" would make libcurl rebuild the list of its decoders on every transfer.
        acceptEncoding = strdup(CurlGlobal.supportedEncodings)
        httpProxy = strdup(proxy.http)
        httpsProxy = strdup(proxy.https)
        noProxy = strdup(proxy.noProxy)
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for override in hostOverrides {
            list = curl_slist_append(list, override.resolveEntry)
        }
        resolveList = list
    }

    func free() {
        for pointer in [userAgent, protocols, acceptEncoding, httpProxy, httpsProxy, noProxy] {
            Glibc.free(pointer)
        }
        if let resolveList { curl_slist_free_all(resolveList) }
    }
}
