// The response-cache modes of brick-offline-probe:
//   cache-store DIR NAME COUNT  stores COUNT responses (`http://probe/item/I`, body `item I`), prints
//                               `stored COUNT`
//   cache-write DIR NAME        stores responses in a loop, 50 keys over and over, bodies of random
//                               sizes (some in files) with their FNV-1a digest in `X-Digest`; prints
//                               `ack I` once store I returned
//   cache-open DIR NAME         opens (creating) the cache, prints `opened` or the error
import BrickOffline
import BrickRequest
import Foundation
import HTTPTypes

func runCacheProbe(_ arguments: [String]) throws -> Never {
    if arguments[1] == "cache-open" {
        do {
            _ = try SQLiteResponseCache(name: arguments[3], directory: URL(fileURLWithPath: arguments[2]))
            say("opened")
            exit(0)
        } catch {
            say("\(error)")
            exit(1)
        }
    }
    let cache = try SQLiteResponseCache(
        name: arguments[3],
        directory: URL(fileURLWithPath: arguments[2]),
        maxBytes: 64 * 1024 * 1024,
        fileThreshold: 16 * 1024
    )
    func response(url: String, body: Data, fields: HTTPFields) -> CachedResponse {
        CachedResponse(
            key: CacheKey(method: "GET", url: url),
            variant: "",
            status: 200,
            headerFields: fields,
            body: body,
            url: url,
            requestTime: Date(),
            responseTime: Date()
        )
    }
    switch arguments[1] {
    case "cache-store":
        let count = Int(arguments[4]) ?? 0
        for index in 0..<count {
            var fields = HTTPFields()
            fields[.cacheControl] = "max-age=600"
            try cache.store(response(url: "http://probe/item/\(index)", body: Data("item \(index)".utf8), fields: fields))
        }
        // On disk before another process looks (stores are written by the cache's own writer).
        try cache.flush()
        say("stored \(count)")
    case "cache-write":
        var index = 0
        while true {
            let size = index % 3 == 0 ? Int.random(in: 20_000...300_000) : Int.random(in: 1...4_000)
            var generator = SystemRandomNumberGenerator()
            let words = (0..<(size + 7) / 8).map { _ in generator.next() as UInt64 }
            let body = words.withUnsafeBytes { Data($0.prefix(size)) }
            var fields = HTTPFields()
            fields[HTTPField.Name("X-Digest")!] = fnv1a(body)
            fields[HTTPField.Name("X-Index")!] = String(index)
            try cache.store(response(url: "http://probe/k/\(index % 50)", body: body, fields: fields))
            try cache.flush()
            say("ack \(index)")
            index += 1
        }
    default:
        say("unknown mode \(arguments[1])")
        exit(2)
    }
    exit(0)
}

/// FNV-1a, 64 bits, hex: the digest the test checks each body against.
func fnv1a(_ data: Data) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in data {
        hash ^= UInt64(byte)
        hash = hash &* 0x100_0000_01b3
    }
    return String(hash, radix: 16)
}
