import CCurl
import Glibc
import Testing

/// libcurl's `calloc` (installed through `curl_global_init_mem`) is `malloc` + zeroing, so small
/// blocks come from glibc's per-thread cache. It must still be a `calloc`: zeroed memory, and no
/// block when the size overflows.
@Suite("The calloc BrickRequest gives libcurl", .timeLimit(.minutes(2)))
struct CurlAllocatorTests {
    @Test("a reused block comes back zeroed")
    func zeroesReusedBlocks() throws {
        // A block of the same size, dirtied and freed, is what malloc hands out next on this thread.
        for size in [24, 100, 1_000, 40_000] {
            let dirty = try #require(malloc(size))
            memset(dirty, 0xAB, size)
            free(dirty)
            let block = try #require(ccurl_calloc(1, size))
            let bytes = UnsafeRawBufferPointer(start: block, count: size)
            #expect(bytes.allSatisfy { $0 == 0 }, "size \(size)")
            free(block)
        }
        let array = try #require(ccurl_calloc(16, 8))
        #expect(UnsafeRawBufferPointer(start: array, count: 128).allSatisfy { $0 == 0 })
        free(array)
    }

    @Test("a count times size that overflows gives no block")
    func refusesOverflow() {
        // Each product is at least 2^64, so it wraps around in size_t: no byte may be allocated.
        #expect(ccurl_calloc(1 << 62, 8) == nil)
        #expect(ccurl_calloc(1 << 33, 1 << 33) == nil)
        #expect(ccurl_calloc(Int.max, Int.max) == nil)
    }
}
