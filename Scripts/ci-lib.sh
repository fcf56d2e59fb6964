# Shared by `.ci/run` and `Scripts/sanitize.sh` (sourced): one bounded way to run `swift test` and
# read what its log says went wrong.
#
#   bounded_test LIMIT LOG ARGS…   `swift test ARGS…` (already built: pass --skip-build) for at most
#                                  LIMIT seconds, its output in LOG. A run still going then gets
#                                  SIGQUIT (the Swift runtime prints every thread's backtrace into
#                                  LOG), then SIGKILL 30 s later; the tests still running are named.
#                                  Returns swift test's status (124 or 131: it ran out of time).
#   failed_suites LOG              the test files (one regex, `A|B`) of the tests that recorded an issue
#   unfinished_tests LOG           the tests that started and never ended (a wedged run)

bounded_test() {
    local limit=$1 log=$2 status
    shift 2
    set +e
    timeout --signal=QUIT --kill-after=30 "$limit" swift test "$@" >"$log" 2>&1
    status=$?
    set -e
    if [ "$status" -eq 124 ] || [ "$status" -eq 131 ] || [ "$status" -eq 137 ]; then
        echo "ci: swift test ran out of its ${limit} s; the tests still running:"
        unfinished_tests "$log" | sed 's/^/    /'
        grep -m1 -A60 -E "^\*\*\* (Program crashed|Signal)|Thread 0 " "$log" || true
    fi
    return "$status"
}

failed_suites() {
    grep -oE "recorded an issue (with [^ ]+ argument[^ ]* .* )?at [A-Za-z]+\.swift" "$1" \
        | grep -oE "[A-Za-z]+\.swift$" | sed 's/\.swift$//' | sort -u | paste -sd'|' - || true
}

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
