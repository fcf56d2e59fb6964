#!/usr/bin/env python3
"""Every brick-bench mode side by side with the raw C libcurl client, in one interleaved run.

    Benchmarks/compare-modes.py [--rounds K] URL REQUESTS CONCURRENCY

compare.sh measures the default mode against every peer; this script answers the next question —
which layer costs what — by running the C client (both of its loops) and each brick-bench mode
round after round, pairing every ratio with the C run of the same round (the machine drifts between
rounds), and reporting CPU per 1,000 requests, the steadier signal on a shared machine.

Needs `swift build -c release` in Benchmarks/ and the C peer that compare.sh builds
(`$BENCH_CACHE_DIR/bin/curl_multi`, default ~/.cache/http-bench), and a server (compare.sh's
server.sh). BENCH_CA_FILE is passed through for https.
"""
import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BRICK = os.path.join(HERE, ".build", "release", "brick-bench")
CACHE = os.environ.get("BENCH_CACHE_DIR", os.path.expanduser("~/.cache/http-bench"))
C_CLIENT = os.path.join(CACHE, "bin", "curl_multi")

MODES = [
    ("C socket", {}, C_CLIENT),
    ("C poll", {"CURL_MULTI_API": "poll"}, C_CLIENT),
    ("transport", {"BRICK_BENCH_MODE": "transport"}, BRICK),
    ("response(_:) default queue", {"BRICK_BENCH_MODE": "callback"}, BRICK),
    ("response(_:) .transportThread", {"BRICK_BENCH_MODE": "callback", "BRICK_BENCH_CALLBACK_QUEUE": "transport"}, BRICK),
    ("value", {"BRICK_BENCH_MODE": "async"}, BRICK),
    ("value on taskExecutor", {"BRICK_BENCH_MODE": "async", "BRICK_BENCH_EXECUTOR": "transport"}, BRICK),
]


def run(binary, extra_env, url, requests, concurrency):
    """Runs one client; returns (rps, CPU ms per 1k requests)."""
    env = dict(os.environ, **extra_env)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([binary, url, str(requests), str(concurrency)], capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or "rps=" not in lines[-1] or " failed=0 " not in lines[-1]:
        sys.exit(f"{shlex.join([binary, url, str(requests), str(concurrency)])} failed: {done.stdout}{done.stderr}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return float(lines[-1].split("rps=")[1]), cpu * 1e6 / requests


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("requests", type=int)
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    for binary in {BRICK, C_CLIENT}:
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is missing (swift build -c release in Benchmarks/, and compare.sh once for the C peer)")

    ratios = {name: [] for name, _, _ in MODES}
    cpus = {name: [] for name, _, _ in MODES}
    for _ in range(arguments.rounds):
        results = {name: run(binary, env, arguments.url, arguments.requests, arguments.concurrency)
                   for name, env, binary in MODES}
        best = max(results["C socket"][0], results["C poll"][0])
        for name, (rps, cpu) in results.items():
            ratios[name].append(rps / best)
            cpus[name].append(cpu)

    print(f"{arguments.url} x{arguments.requests} c{arguments.concurrency}, {arguments.rounds} interleaved rounds")
    print(f"| client | rps vs faster C (median of paired rounds) | CPU ms / 1k req (median) |")
    print("|---|---:|---:|")
    for name, _, _ in MODES:
        print(f"| {name} | {statistics.median(ratios[name]):.2f} | {statistics.median(cpus[name]):.1f} |")


if __name__ == "__main__":
    main()
