#!/usr/bin/env bash
# Runs the suites that exercise the transport, the session, the safe point, the caches, the queue
# and the manager under ThreadSanitizer and AddressSanitizer (CI runs both on every run).
#
#   Scripts/sanitize.sh [thread|address|both]   the subset CI runs (BRICK_SANITIZER_SUBSET: SQLite
#                                              only, no PostgreSQL/OpenAPI/tracing/integration builds)
#   BRICK_SANITIZE_ALL=1 Scripts/sanitize.sh …  the whole suite instead (a much longer build)
#   BRICK_SANITIZE_FILTER=REGEX Scripts/sanitize.sh …  only the tests REGEX names
#
# Any report fails the run: TSan exits non-zero when it reported a race (halt_on_error stops at the
# first), ASan aborts at the first bad access.
set -euo pipefail
cd "$(dirname "$0")/.."

# Both test targets but the kill -9 loops (their probes would be instrumented too, for nothing a
# sanitizer checks; the SQLite cache's kill test still runs).
skip='CrashTests'
filter=(--filter "${BRICK_SANITIZE_FILTER:-BrickRequestTests|BrickOfflineTests}" --skip "$skip")
if [ -n "${BRICK_SANITIZE_ALL:-}" ]; then
    filter=()
else
    export BRICK_SANITIZER_SUBSET=1
fi

thread() {
    local started=$SECONDS
    echo "sanitize: ThreadSanitizer"
    TSAN_OPTIONS="suppressions=$PWD/.ci/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
        swift test --scratch-path .build-tsan --sanitize=thread -Xswiftc -DBRICK_SANITIZER_LOCKS \
        ${filter[@]+"${filter[@]}"} 2>&1 | tail -n 40
    echo "sanitize: ThreadSanitizer passed in $((SECONDS - started)) s"
}

address() {
    local started=$SECONDS
    echo "sanitize: AddressSanitizer"
    ASAN_OPTIONS="suppressions=$PWD/.ci/asan.supp detect_leaks=0 abort_on_error=1" SWIFT_BACKTRACE=enable=no \
        swift test --scratch-path .build-asan --sanitize=address ${filter[@]+"${filter[@]}"} 2>&1 | tail -n 40
    echo "sanitize: AddressSanitizer passed in $((SECONDS - started)) s"
}

case "${1:-both}" in
    thread) thread ;;
    address) address ;;
    both) thread; address ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
esac
