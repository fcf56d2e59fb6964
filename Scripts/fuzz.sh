#!/usr/bin/env bash
# Fuzzes the parsers with libFuzzer under AddressSanitizer (Tests/Fuzz/BrickFuzz).
#
#   Scripts/fuzz.sh build                 build brick-fuzz (into .build-asan, beside the ASan suites)
#   Scripts/fuzz.sh replay                replay every committed corpus (CI)
#   Scripts/fuzz.sh run TARGET SECONDS    fuzz one target; new inputs go to .build-asan/corpus/TARGET
#   Scripts/fuzz.sh smoke SECONDS         replay, then fuzz every target SECONDS each (CI)
#   Scripts/fuzz.sh path                  build brick-fuzz if needed and print its path
#   Scripts/fuzz.sh merge TARGET          add what .build-asan/corpus/TARGET covers that the
#                                         committed corpus does not (then commit Tests/Fuzz/Corpus)
#
# A crash or a failed check stops the run with the input saved as .build-asan/artifacts/crash-…;
# fix it and add the input to Tests/Fuzz/Corpus/TARGET as a regression.
set -euo pipefail
cd "$(dirname "$0")/.."

source Scripts/ci-lib.sh
# The AddressSanitizer build of Scripts/sanitize.sh (asan_build): after it, brick-fuzz is already built.
scratch=.build-asan
export BRICK_FUZZ=1 BRICK_SANITIZER_SUBSET=1
# libFuzzer reports a crash itself (and saves the input); the Swift backtracer would only delay it.
export SWIFT_BACKTRACE=enable=no
corpus=Tests/Fuzz/Corpus
targets=(json sse response-headers url retry-after cache-headers stored-request netlink)

build() {
    swift build --product brick-fuzz "${asan_build[@]}" >&2
    echo "$(swift build "${asan_build[@]}" --show-bin-path)/brick-fuzz"
}

fuzzer() {
    local binary
    # BRICK_FUZZ_BINARY: a brick-fuzz already built (CI finds it before its ASan tests start, then
    # fuzzes beside them: a SwiftPM command here would wait for theirs to end).
    binary=${BRICK_FUZZ_BINARY:-$(build)}
    mkdir -p "$scratch/artifacts"
    echo "$binary"
}

replay() {
    local binary=$1 target
    for target in "${targets[@]}"; do
        echo "fuzz: replaying $corpus/$target ($(ls "$corpus/$target" | wc -l) inputs)"
        "$binary" "$target" -runs=0 -artifact_prefix="$scratch/artifacts/" "$corpus/$target" 2>&1 | tail -1
    done
}

run() {
    local binary=$1 target=$2 seconds=$3
    mkdir -p "$scratch/corpus/$target"
    echo "fuzz: $target for ${seconds}s"
    local status
    # grep hides libFuzzer's progress lines; the fuzzer's own status decides.
    set +e
    "$binary" "$target" -max_total_time="$seconds" -print_final_stats=1 -max_len=8192 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$scratch/artifacts/" "$scratch/corpus/$target" "$corpus/$target" \
        2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|fuzz check|Fatal error|SUMMARY|Test unit written"
    status=${PIPESTATUS[0]}
    set -e
    [ "$status" -eq 0 ] || echo "fuzz: $target FAILED (status $status)"
    return "$status"
}

case "${1:-}" in
    build | path) build ;;
    replay) replay "$(fuzzer)" ;;
    run) run "$(fuzzer)" "$2" "$3" ;;
    smoke)
        binary=$(fuzzer)
        replay "$binary"
        for target in "${targets[@]}"; do run "$binary" "$target" "${2:-10}"; done
        ;;
    merge)
        binary=$(fuzzer)
        "$binary" "$2" -merge=1 "$corpus/$2" "$scratch/corpus/$2" 2>&1 | tail -2
        ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
esac
