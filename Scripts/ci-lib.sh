# Shared by `.ci/run` and `Scripts/sanitize.sh` (sourced): one bounded way to run `swift test` and
# read what its log says went wrong.
#
#   bounded_test LIMIT LOG ARGS…   `swift test ARGS…` (already built: pass --skip-build) for at most
#                                  LIMIT seconds, its output in LOG. A run still going then has the
#                                  tests still running named, gets SIGQUIT (the Swift runtime
#                                  prints every thread's backtrace into LOG), then SIGKILL 30 s
#                                  later, with every process it started. Returns swift test's
#                                  status, or 124 when it ran out of time.
#   crashes LOG                    the lines that say the test process crashed
#   unfinished_tests LOG           the tests that started and never ended (a wedged run)
#   asan_build                     the arguments of the one AddressSanitizer build (below)

# One AddressSanitizer build serves both the sanitizer's suites (Scripts/sanitize.sh) and the
# parsers' fuzzer (Scripts/fuzz.sh): every Swift module gets libFuzzer's coverage instrumentation
# (what `-sanitize=fuzzer` adds: edge counters, comparisons, indirect calls; unused outside
# brick-fuzz, the ASan runtime's weak callbacks take them), and only brick-fuzz links libFuzzer,
# without its main (Tests/Fuzz/CFuzzer; found in the toolchain's compiler-rt directory), with the
# toolchain's lld (the system's gold fails on libFuzzer's archive).
# `-sanitize=fuzzer` itself cannot be used: it links libFuzzer's main into every executable, the test
# runner's too. A second instrumented build of the same modules cost CI minutes for nothing.
# BRICK_FUZZ declares brick-fuzz; BRICK_SANITIZER_SUBSET keeps the sanitizer's targets. (The index
# store stays: SwiftPM finds the tests of a Linux build through it.)
compiler_rt=$(echo "$(dirname "$(readlink -f "$(command -v swiftc)")")"/../lib/clang/*/lib/linux)
asan_build=(--scratch-path .build-asan --sanitize=address
    -Xswiftc -sanitize-coverage=edge,indirect-calls,trace-cmp,inline-8bit-counters,pc-table
    -Xlinker -L"$compiler_rt" -Xswiftc -use-ld=lld)

bounded_test() {
    local limit=$1 log=$2 status started=$SECONDS pid
    shift 2
    # `swift test` runs the tests in a process of its own, in a process group of its own: a
    # `timeout` on `swift test` would stop swift-test and leave that process running. So the
    # limit is kept here, and it reaches every process swift test started.
    # In a session of its own: every process it starts — the test process, a crash reporter that
    # outlives a crashed one and holds swift test's pipe open — can be found and stopped.
    setsid swift test "$@" >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - started)) -lt "$limit" ]; do sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "ci: swift test ran out of its ${limit} s; the tests still running:"
        unfinished_tests "$log" | sed 's/^/    /'
        # Every process below swift test, found before any of them ends (an orphan is reparented
        # and could not be found again). SIGQUIT first: the Swift runtime writes every thread's
        # backtrace into the log; SIGKILL for whatever is left 30 s later.
        local tree waited=0
        tree=$(process_tree "$pid")
        kill -QUIT $tree 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 30 ]; do sleep 1; waited=$((waited + 1)); done
        kill -KILL $tree $(process_tree "$pid") 2>/dev/null || true
        pkill -KILL -s "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        grep -m1 -A60 -E "^\*\*\* (Program crashed|Signal)|^Thread 0" "$log" || true
        return 124
    fi
    status=0
    wait "$pid" || status=$?
    # Whatever it started and left behind (a hung crash reporter) goes too.
    pkill -KILL -s "$pid" 2>/dev/null || true
    crashes "$log" | sed 's/^/ci: CRASH: /'
    return "$status"
}

# The lines of LOG that say a process crashed (a Swift runtime trap, a signal, a sanitizer's own
# failure): printed by bounded_test.
crashes() {
    grep -E "Fatal error:|^\*\*\* (Program crashed|Signal)|CHECK failed:|ERROR: ThreadSanitizer|^Crash: " "$1" | head -5 || true
}

# Process PID and every process below it, children first.
process_tree() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do process_tree "$child"; done
    echo "$1"
}

# The tests that started and never ended (a wedged run).
unfinished_tests() {
    python3 - "$1" <<'PYTHON'
import re, sys
started, ended = {}, set()
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = re.match(r'◇ Test (?:case .* to )?("(?:[^"\\]|\\.)*") started', line)
    if m:
        started[m.group(1)] = True
        continue
    m = re.match(r'[✔✘] Test ("(?:[^"\\]|\\.)*")(?: with .*)? (?:passed|failed) after', line)
    if m:
        ended.add(m.group(1))
for name in started:
    if name not in ended:
        print(name)
PYTHON
}
