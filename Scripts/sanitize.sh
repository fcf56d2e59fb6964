#!/usr/bin/env bash
# Runs the suites that exercise the transport, the session, the safe point, the caches, the queue
# and the manager under ThreadSanitizer and AddressSanitizer (CI runs one of the two on every run).
#
#   Scripts/sanitize.sh [thread|address|both]   the subset CI runs (BRICK_SANITIZER_SUBSET: SQLite
#                                              only, no PostgreSQL/OpenAPI/tracing/integration builds)
#   BRICK_SANITIZE_ALL=1 Scripts/sanitize.sh …  the whole suite instead (a much longer build)
#   BRICK_SANITIZE_FILTER=REGEX Scripts/sanitize.sh …  only the tests REGEX names (with either)
#   BRICK_SANITIZE_STEP=build|test Scripts/sanitize.sh …  only build, or only run the tests of a
#                                              build made before (CI builds in the background, then
#                                              tests once its main suite is done)
#
# Any report fails the run: TSan exits non-zero when it reported a race (halt_on_error stops at the
# first), ASan aborts at the first bad access.
set -euo pipefail
cd "$(dirname "$0")/.."
source Scripts/ci-lib.sh

# Both test targets but the kill -9 loops, the power cuts and the clock steps (their probes would
# be instrumented too, for nothing a sanitizer checks; a FUSE file system in Python under an
# instrumented writer takes minutes; libfaketime's preload and ThreadSanitizer's interceptors do not
# mix). The SQLite cache's kill test still runs.
if [ -n "${BRICK_SANITIZE_ALL:-}" ]; then
    filter=()
else
    export BRICK_SANITIZER_SUBSET=1
    filter=(--skip "CrashTests|PowerLossTests|ClockStepTests")
fi
# At most 4 tests at a time (BRICK_SANITIZE_WIDTH to change it). Swift Testing otherwise starts
# every test at once: under TSan on two cores that was ~600 threads (a server's event loops and a
# session's transport thread per test), every test at a hundredth of a core, and a third of the
# suite past its time limit — the "stalls" of earlier CI runs. Four at a time: the subset in 92 s.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${BRICK_SANITIZE_WIDTH:-4}
if [ -n "${BRICK_SANITIZE_FILTER:-}" ]; then
    filter+=(--filter "$BRICK_SANITIZE_FILTER")
fi

# `run NAME --scratch-path SCRATCH BUILD-ARGUMENTS…` runs `swift test` under one sanitizer (the
# arguments go to both the build and the test); the whole log goes to SCRATCH/sanitize.log, and on failure
# the first report and the failed tests are shown. Built first, then tested for at most
# BRICK_SANITIZE_LIMIT seconds (default 1200; a wedged run fails with the tests still running named
# and a backtrace, never holds CI).
run() {
    local name=$1 scratch=$3 started=$SECONDS status limit=${BRICK_SANITIZE_LIMIT:-1200}
    shift
    local step=${BRICK_SANITIZE_STEP:-all}
    echo "sanitize: $name"
    mkdir -p "$scratch"
    if [ "$step" != test ]; then
        if ! timeout --kill-after=30 2400 swift build --build-tests "$@" > "$scratch/build.log" 2>&1; then
            tail -n 40 "$scratch/build.log"
            echo "sanitize: $name: the build failed in $((SECONDS - started)) s"
            return 1
        fi
        echo "sanitize: $name: built in $((SECONDS - started)) s"
        [ "$step" = build ] && return 0
    fi
    status=0
    bounded_test "$limit" "$scratch/sanitize.log" --skip-build "$@" ${filter[@]+"${filter[@]}"} || status=$?
    grep -E "^(✔|✘|━) Test run" "$scratch/sanitize.log" || true
    if [ "$status" -ne 0 ]; then
        grep -m1 -A40 -E "WARNING: ThreadSanitizer|ERROR: AddressSanitizer" "$scratch/sanitize.log" || true
        grep -E "^✘ Test .* recorded an issue" "$scratch/sanitize.log" | head -20 || true
        tail -n 20 "$scratch/sanitize.log"
        echo "sanitize: $name FAILED (status $status) in $((SECONDS - started)) s; the whole log: $scratch/sanitize.log"
        return "$status"
    fi
    echo "sanitize: $name passed in $((SECONDS - started)) s"
}

thread() {
    # No Swift backtracer under TSan: on a crash the two fight (a TSan CHECK failure), and the
    # backtracer was left hanging with swift test's pipe open. TSan reports on its own.
    TSAN_OPTIONS="suppressions=$PWD/.ci/tsan.supp halt_on_error=1 second_deadlock_stack=1 handle_sigill=1 handle_abort=1" SWIFT_BACKTRACE=enable=no \
        run ThreadSanitizer --scratch-path .build-tsan --sanitize=thread -Xswiftc -DBRICK_SANITIZER_LOCKS
}

address() {
    # The build Scripts/fuzz.sh runs brick-fuzz from (asan_build in ci-lib.sh).
    ASAN_OPTIONS="suppressions=$PWD/.ci/asan.supp detect_leaks=0 abort_on_error=1" SWIFT_BACKTRACE=enable=no BRICK_FUZZ=1 \
        run AddressSanitizer "${asan_build[@]}"
}

case "${1:-both}" in
    thread) thread ;;
    address) address ;;
    both) thread; address ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
esac
