#!/usr/bin/env python3
"""Two builds of brick-bench, interleaved round by round: what a change costs per request.

    Benchmarks/compare-builds.py BEFORE AFTER URL REQUESTS CONCURRENCY [--rounds K] [--mode MODE]

BEFORE and AFTER are brick-bench binaries (build the older commit in a worktree:
`git worktree add /tmp/before <commit> && (cd /tmp/before/Benchmarks && swift build -c release)`).
Each round runs both, alternating which goes first; it prints the median rps and CPU per request of
each, and the median of the per-round CPU ratios (after / before), the steadier figure on a noisy
machine. MODE is BRICK_BENCH_MODE (callback, async, transport, …; default callback).
"""
import argparse
import os
import resource
import statistics
import subprocess


def run(binary, url, requests, concurrency, mode):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([binary, url, str(requests), str(concurrency)], capture_output=True, text=True,
                          env=dict(os.environ, BRICK_BENCH_MODE=mode))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0 or "rps=" not in last or " failed=0 " not in last:
        raise SystemExit(f"{binary} failed: {done.stdout}{done.stderr[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e6 / requests
    return float(last.split("rps=")[1].split()[0]), cpu


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("url")
    parser.add_argument("requests", type=int)
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--mode", default="callback")
    arguments = parser.parse_args()
    builds = [("before", arguments.before), ("after", arguments.after)]
    results = {name: [] for name, _ in builds}
    for round in range(arguments.rounds):
        for name, binary in (builds if round % 2 == 0 else list(reversed(builds))):
            results[name].append(run(binary, arguments.url, arguments.requests, arguments.concurrency, arguments.mode))
    for name, runs in results.items():
        print(f"{name}: rps median {statistics.median(r for r, _ in runs):.0f}, "
              f"CPU µs/request median {statistics.median(c for _, c in runs):.2f}")
    ratios = [a[1] / b[1] for a, b in zip(results["after"], results["before"])]
    print("CPU after/before per round:", " ".join(f"{r:.3f}" for r in ratios),
          f"— median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
