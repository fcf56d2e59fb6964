import CZlib

/// gzip compression for the `/gzip` route and for users' own fixtures.
public enum Gzip {
    /// Compresses bytes into the gzip format.
    ///
    /// - Parameter bytes: The uncompressed bytes.
    /// - Returns: A gzip member holding them.
    public static func compress(_ bytes: [UInt8]) -> [UInt8] {
        compress(totalSize: bytes.count) { offset, count in Array(bytes[offset..<(offset + count)]) }
    }

    /// Compresses `count` zero bytes without materialising them: a small body that decodes to a
    /// large one (a "gzip bomb"), for testing response-size limits.
    ///
    /// - Parameter count: How many zero bytes the output decodes to.
    /// - Returns: The gzip bytes.
    public static func zeros(_ count: Int) -> [UInt8] {
        let chunk = [UInt8](repeating: 0, count: 64 * 1024)
        return compress(totalSize: count) { _, length in Array(chunk[0..<length]) }
    }

    private static func compress(totalSize: Int, chunk: (Int, Int) -> [UInt8]) -> [UInt8] {
        var stream = z_stream()
        precondition(czlib_deflate_init_gzip(&stream, 9) == Z_OK, "deflateInit2 failed")
        defer { deflateEnd(&stream) }
        var output: [UInt8] = []
        var outBuffer = [UInt8](repeating: 0, count: 64 * 1024)
        var offset = 0
        repeat {
            let length = min(64 * 1024, totalSize - offset)
            var input = chunk(offset, length)
            offset += length
            let flush = offset >= totalSize ? Z_FINISH : Z_NO_FLUSH
            input.withUnsafeMutableBufferPointer { inPointer in
                stream.next_in = inPointer.baseAddress
                stream.avail_in = UInt32(length)
                repeat {
                    outBuffer.withUnsafeMutableBufferPointer { outPointer in
                        stream.next_out = outPointer.baseAddress
                        stream.avail_out = UInt32(outPointer.count)
                        _ = deflate(&stream, flush)
                        output.append(contentsOf: outPointer[0..<(outPointer.count - Int(stream.avail_out))])
                    }
                } while stream.avail_out == 0
            }
        } while offset < totalSize
        return output
    }
}
