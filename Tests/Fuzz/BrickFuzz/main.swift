// brick-fuzz: libFuzzer entry points for the parsers that read what a server, a stored file or the
// kernel hands us. Built only by Scripts/fuzz.sh and Scripts/sanitize.sh (BRICK_FUZZ=1, ASan + coverage):
//
//     brick-fuzz TARGET [libFuzzer flags] [corpus directories]
//
// TARGET is one of FuzzTargets.named (json, sse, response-headers, url, retry-after,
// cache-headers, stored-request, netlink). Everything after it goes to libFuzzer unchanged.
import CFuzzer
import Glibc

let arguments = CommandLine.arguments
// The target comes first; libFuzzer's merge and fork modes start this program again with its own
// flags only, so the target also travels in the environment, which those children inherit.
let named = arguments.count >= 2 && FuzzTargets.named[arguments[1]] != nil
let targetName = named ? arguments[1] : getenv("BRICK_FUZZ_TARGET").map { String(cString: $0) }
guard let targetName, let target = FuzzTargets.named[targetName] else {
    let names = FuzzTargets.named.keys.sorted().joined(separator: ", ")
    print("usage: brick-fuzz TARGET [libFuzzer flags] [corpus…]\ntargets: \(names)")
    exit(2)
}
setenv("BRICK_FUZZ_TARGET", targetName, 1)
FuzzTargets.selected = target

// libFuzzer reads its own flags from argv: the program's name, then what follows TARGET.
var fuzzerArguments: [UnsafeMutablePointer<CChar>?] = [CommandLine.unsafeArgv[0]]
for index in (named ? 2 : 1)..<Int(CommandLine.argc) { fuzzerArguments.append(CommandLine.unsafeArgv[index]) }
fuzzerArguments.append(nil)
var fuzzerArgumentCount = Int32(fuzzerArguments.count - 1)
let status = fuzzerArguments.withUnsafeMutableBufferPointer { buffer in
    var base = buffer.baseAddress
    return LLVMFuzzerRunDriver(&fuzzerArgumentCount, &base) { data, size in fuzzOneInput(data, size) }
}
exit(status)
