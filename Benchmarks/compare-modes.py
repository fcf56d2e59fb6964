#!/usr/bin/env python3
"""Every brick-bench mode side by side with the raw C libcurl client, in one interleaved run.

    Benchmarks/compare-modes.py [--rounds K] URL REQUESTS CONCURRENCY

compare.sh measures the default mode against every peer; this script answers the next question —
which layer costs what — by running the C client (both of its loops) and each brick-bench mode
round after round, pairing every ratio with the C run of the same round (the machine drifts between
rounds), and reporting CPU per 1,000 requests, the steadier signal on a shared machine.

    Benchmarks/compare-modes.py --instructions URL REQUESTS CONCURRENCY

counts instructions instead, under valgrind's callgrind: each client runs REQUESTS and then
3 x REQUESTS requests, and the difference divided by 2 x REQUESTS is its steady-state cost per request
(start-up, the first connections and the first wave cancel out). Each count is the lower of two
runs (a run in which the server happens to answer later makes extra rounds of the event loop); what
is left repeats to about 1% up to c16, so it shows changes that no timing on a shared machine can
(at c128 every client's count moves by several percent: libcurl's walk of its connection cache
depends on the order in which connections finish). It does not see
what threads cost (cache traffic, locks, atomics), which only the timed mode does. Needs valgrind.

    Benchmarks/compare-modes.py --instructions --scenarios [REQUESTS]

does it for every scenario of compare.sh against `../shared/bench/server.sh`'s nginx (`/small` at
c1, c16 and c128, `/64k` at c16, `/small` over HTTP/2 at c16; BENCH_HTTP_PORT, BENCH_HTTPS_PORT and
BENCH_RUN_DIR as server.sh reads them), and prints one table: the leaner C loop's count beside
brick-bench's callback form (`response(_:)`), the ratio, and `CurlTransport` alone.

    Benchmarks/compare-modes.py --footprint URL REQUESTS CONCURRENCY

counts, the same way, the 64-byte lines of code each request runs (an instruction counts when the
extra requests ran it at least once per two), split by library: at c1 a client sleeps between
responses while the kernel and the server run, so each request starts with cold caches and pays
for its code's size more than for its instruction count.

Both leave the two `value` modes out: valgrind 3.19 (Debian 12) dies with SIGSEGV on Swift
concurrency's executor threads.

    Benchmarks/compare-modes.py --critical-path URL REQUESTS 1

splits each request of a one-at-a-time (c1) run in two, from the kernel's side, with two syscall
tracepoints under `perf record`: *client* time, from the first read of a response to the send of the
next request (everything the client does to finish one request and start the next), and *wait*
time, from that send to the next response's first read (the kernel, the server, and the client's
own sleep and wake-up). The median of each over the run, then over ROUNDS interleaved rounds. Unlike
rps these medians repeat to about a microsecond on a noisy machine, and they say where a c1 gap
lies. Needs `perf` and permission to trace syscalls (root, or perf_event_paranoid at most 1 with
tracefs readable).

The timed mode also runs `keep-bodies.c` (built here with `cc`, next to brick-bench), a raw libcurl
client with the C peers' poll loop that keeps every body instead of counting its bytes, twice: with
one buffer per easy handle reused for the whole run ("keeps bodies, reused buffer", the cheapest a C
program can keep a body) and with a buffer allocated per response and freed when it is done ("keeps
bodies, malloc per response"). Its ratios say what keeping bodies costs by itself, apart from
BrickRequest.

Needs `swift build -c release` in Benchmarks/ and the C peer that compare.sh builds
(`$BENCH_CACHE_DIR/bin/curl_multi`, default ~/.cache/http-bench), and a server (compare.sh's
server.sh). BENCH_CA_FILE is passed through for https.
"""
import argparse
import collections
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BRICK = os.path.join(HERE, ".build", "release", "brick-bench")
CACHE = os.environ.get("BENCH_CACHE_DIR", os.path.expanduser("~/.cache/http-bench"))
C_CLIENT = os.path.join(CACHE, "bin", "curl_multi")

KEEP_BODIES_SOURCE = os.path.join(HERE, "keep-bodies.c")
KEEP_BODIES = os.path.join(HERE, ".build", "keep-bodies")

MODES = [
    ("C socket", {}, C_CLIENT),
    ("C poll", {"CURL_MULTI_API": "poll"}, C_CLIENT),
    ("C poll, keeps bodies, reused buffer", {"KEEP_BODIES": "reuse"}, KEEP_BODIES),
    ("C poll, keeps bodies, malloc per response", {"KEEP_BODIES": "malloc"}, KEEP_BODIES),
    ("transport", {"BRICK_BENCH_MODE": "transport"}, BRICK),
    ("transport, streamed body", {"BRICK_BENCH_MODE": "stream"}, BRICK),
    ("response(_:) default queue", {"BRICK_BENCH_MODE": "callback"}, BRICK),
    ("response(_:) .transportThread", {"BRICK_BENCH_MODE": "callback", "BRICK_BENCH_CALLBACK_QUEUE": "transport"}, BRICK),
    ("value", {"BRICK_BENCH_MODE": "async"}, BRICK),
    ("value, resumesTasksAtSafePoint (opt-in)", {"BRICK_BENCH_MODE": "async", "BRICK_BENCH_RESUME_AT_SAFE_POINT": "1"}, BRICK),
    ("value on taskExecutor", {"BRICK_BENCH_MODE": "async", "BRICK_BENCH_EXECUTOR": "transport"}, BRICK),
]


def build_keep_bodies():
    """Compiles keep-bodies.c next to brick-bench when the binary is missing or older."""
    if os.path.exists(KEEP_BODIES) and os.path.getmtime(KEEP_BODIES) >= os.path.getmtime(KEEP_BODIES_SOURCE):
        return
    command = ["cc", "-O2", "-Wall", "-o", KEEP_BODIES, KEEP_BODIES_SOURCE, "-lcurl"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{shlex.join(command)} failed: {done.stderr}")


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


def callgrind(binary, extra_env, url, requests, concurrency, read, dump_instructions=False):
    """Runs one client under callgrind and returns `read(path of its profile)`."""
    env = dict(os.environ, **extra_env)
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={output}"]
        if dump_instructions:
            command.append("--dump-instr=yes")
        command += [binary, url, str(requests), str(concurrency)]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines or f" ok={requests} " not in lines[-1]:
            sys.exit(f"{shlex.join(command)} failed: {done.stdout}{done.stderr[-2000:]}")
        return read(output)


def total_instructions(path):
    """The `totals:` line of a callgrind profile."""
    with open(path) as profile:
        for line in profile:
            if line.startswith("totals:"):
                return int(line.split()[1])
    sys.exit(f"{path}: no totals line in callgrind's output")


def instruction_costs(path):
    """Instructions executed at each address of a `--dump-instr=yes` profile: {(object, address): count}.

    Follows callgrind's format: `ob=` names the object of the cost lines that follow, `(id) name`
    compresses repeated names, a position is absolute (`0x...`), relative (`+n`, `-n`) or the same
    (`*`), and the line after `calls=` carries a call's inclusive cost, which is skipped.
    """
    names = {}
    costs = collections.Counter()
    current_object = None
    address = 0
    call_cost_follows = False
    with open(path) as profile:
        for line in profile:
            if line.startswith(("ob=", "cob=")):
                text = line.split("=", 1)[1].strip()
                match = re.match(r"\((\d+)\)(?: (.*))?$", text)
                if match and match.group(2) is not None:
                    names[match.group(1)] = match.group(2)
                name = names.get(match.group(1), "?") if match else text
                if line.startswith("ob="):
                    current_object = name
                continue
            if line.startswith("calls="):
                call_cost_follows = True
                continue
            if not line or line[0] not in "0123456789+-*":
                continue
            fields = line.split()
            position = fields[0]
            if position.startswith("0x"):
                address = int(position, 16)
            elif position[0] in "+-":
                step = int(position[1:], 0)
                address += step if position[0] == "+" else -step
            elif position != "*":
                address = int(position)
            if call_cost_follows:
                call_cost_follows = False
                continue
            if len(fields) >= 3:
                costs[(current_object, address)] += int(fields[2])
    return costs


def instructions_per_request(binary, extra_env, url, requests, concurrency):
    """Steady-state instructions per request: the cost of 2 x `requests` more requests, divided."""
    small = min(callgrind(binary, extra_env, url, requests, concurrency, total_instructions) for _ in range(2))
    large = min(callgrind(binary, extra_env, url, 3 * requests, concurrency, total_instructions) for _ in range(2))
    return (large - small) / (2 * requests)


def code_footprint(binary, extra_env, url, requests, concurrency):
    """The 64-byte lines of code a request runs in steady state (an instruction counts when the
    2 x `requests` extra requests ran it at least `requests` more times), per object file."""
    small = callgrind(binary, extra_env, url, requests, concurrency, instruction_costs, dump_instructions=True)
    large = callgrind(binary, extra_env, url, 3 * requests, concurrency, instruction_costs, dump_instructions=True)
    lines = collections.defaultdict(set)
    for (code_object, address), count in large.items():
        if count - small.get((code_object, address), 0) >= requests:
            lines[os.path.basename(code_object or "?")].add(address // 64)
    return {code_object: len(found) for code_object, found in lines.items()}


def critical_path(binary, extra_env, url, requests):
    """Median client and wait time per request, in microseconds, of one c1 run (see the module doc)."""
    env = dict(os.environ, **extra_env)
    with tempfile.TemporaryDirectory() as directory:
        data = os.path.join(directory, "perf.data")
        # Request sends (the 1-byte sends are curl_multi_wakeup's) and reads that returned data.
        command = ["perf", "record", "-q", "-o", data,
                   "-e", "syscalls:sys_enter_sendto", "--filter", "len > 1",
                   "-e", "syscalls:sys_exit_recvfrom", "--filter", "ret > 1",
                   binary, url, str(requests), "1"]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines or f" ok={requests} " not in lines[-1]:
            sys.exit(f"{shlex.join(command)} failed: {done.stdout}{done.stderr[-2000:]}")
        script = subprocess.run(["perf", "script", "--ns", "-i", data, "-F", "tid,time,event"],
                                capture_output=True, text=True, check=True).stdout
    events = []
    for line in script.splitlines():
        match = re.match(r"\s*(\d+)\s+([\d.]+):\s+syscalls:(sys_enter_sendto|sys_exit_recvfrom)", line)
        if match:
            events.append((int(match.group(1)), float(match.group(2)), match.group(3) == "sys_enter_sendto"))
    # The thread that sends the requests (the driver, or the C client's only thread).
    senders = collections.Counter(tid for tid, _, is_send in events if is_send)
    if not senders:
        sys.exit(f"{shlex.join(command)}: no request was traced (is perf allowed to trace syscalls?)")
    sender = senders.most_common(1)[0][0]
    client, wait = [], []
    sent = first_read = None
    for tid, time, is_send in events:
        if tid != sender:
            continue
        if is_send:
            if sent is not None and first_read is not None:
                wait.append((first_read - sent) * 1e6)
                client.append((time - first_read) * 1e6)
            sent, first_read = time, None
        elif sent is not None and first_read is None:
            first_read = time
    # The first tenth is warm-up (connection, first requests).
    skip = len(client) // 10
    return statistics.median(client[skip:]), statistics.median(wait[skip:])


def scenarios():
    """compare.sh's scenarios: (name, URL, concurrency, extra environment)."""
    http = f"http://127.0.0.1:{os.environ.get('BENCH_HTTP_PORT', '18080')}"
    https = f"https://127.0.0.1:{os.environ.get('BENCH_HTTPS_PORT', '18443')}"
    run_dir = os.environ.get("BENCH_RUN_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "http-bench-server"))
    trust = {"BENCH_CA_FILE": os.path.join(run_dir, "cert.pem")}
    return [
        ("`/small` c1", http + "/small", 1, {}),
        ("`/small` c16", http + "/small", 16, {}),
        ("`/small` c128", http + "/small", 128, {}),
        ("`/64k` c16", http + "/64k", 16, {}),
        ("h2 `/small` c16", https + "/small", 16, trust),
    ]


def instruction_table(requests):
    """Every scenario's instructions per request: the leaner C loop, the callback form, the transport."""
    print(f"Instructions per request, steady state over {2 * requests} requests (compare-modes.py --instructions "
          "--scenarios; each count the lower of two runs)")
    print("| scenario | raw C client, leaner loop | bricks through `response(_:)` | ratio | `CurlTransport` alone |")
    print("|---|---:|---:|---:|---:|")
    for name, url, concurrency, extra in scenarios():
        c = min(instructions_per_request(C_CLIENT, dict(extra, CURL_MULTI_API=api), url, requests, concurrency)
                for api in ("poll", "socket"))
        brick = instructions_per_request(BRICK, dict(extra, BRICK_BENCH_MODE="callback"), url, requests, concurrency)
        transport = instructions_per_request(BRICK, dict(extra, BRICK_BENCH_MODE="transport"), url, requests,
                                             concurrency)
        print(f"| {name} | {c / 1000:.1f}k | {brick / 1000:.1f}k | {brick / c:.2f} | {transport / 1000:.1f}k |",
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?")
    parser.add_argument("requests", type=int, nargs="?", default=2000)
    parser.add_argument("concurrency", type=int, nargs="?")
    parser.add_argument("--scenarios", action="store_true",
                        help="with --instructions: every compare.sh scenario, one table (URL and CONCURRENCY not given)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per request under callgrind instead of timing")
    parser.add_argument("--footprint", action="store_true",
                        help="count the lines of code a request runs, under callgrind, instead of timing")
    parser.add_argument("--critical-path", action="store_true",
                        help="split each c1 request into client and wait time with syscall tracepoints (perf)")
    arguments = parser.parse_args()
    if arguments.scenarios:
        if not arguments.instructions:
            sys.exit("--scenarios goes with --instructions")
        # `--scenarios 2000`: the number lands in `url`.
        requests = int(arguments.url) if arguments.url else arguments.requests
        for binary in (BRICK, C_CLIENT):
            if not os.access(binary, os.X_OK):
                sys.exit(f"{binary} is missing (swift build -c release in Benchmarks/, and compare.sh once for the C peer)")
        instruction_table(requests)
        return
    if arguments.url is None or arguments.concurrency is None:
        parser.error("URL, REQUESTS and CONCURRENCY are required")
    for binary in {BRICK, C_CLIENT}:
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is missing (swift build -c release in Benchmarks/, and compare.sh once for the C peer)")

    peers_only = {C_CLIENT, BRICK}
    if arguments.critical_path:
        if arguments.concurrency != 1:
            sys.exit("--critical-path measures one request at a time: give CONCURRENCY 1")
        traced = [(name, env, binary) for name, env, binary in MODES if binary in peers_only]
        client = {name: [] for name, _, _ in traced}
        wait = {name: [] for name, _, _ in traced}
        for _ in range(arguments.rounds):
            for name, env, binary in traced:
                run_client, run_wait = critical_path(binary, env, arguments.url, arguments.requests)
                client[name].append(run_client)
                wait[name].append(run_wait)
        best = min(statistics.median(client["C socket"]) + statistics.median(wait["C socket"]),
                   statistics.median(client["C poll"]) + statistics.median(wait["C poll"]))
        print(f"{arguments.url} x{arguments.requests} c1, {arguments.rounds} interleaved rounds: "
              "microseconds per request, medians")
        print("| client | client time | wait time | cycle | vs faster C cycle |")
        print("|---|---:|---:|---:|---:|")
        for name, _, _ in traced:
            mine, theirs = statistics.median(client[name]), statistics.median(wait[name])
            print(f"| {name} | {mine:.1f} | {theirs:.1f} | {mine + theirs:.1f} | {best / (mine + theirs):.2f} |")
        return

    counted = [(name, env, binary) for name, env, binary in MODES
               if binary in peers_only and env.get("BRICK_BENCH_MODE") != "async"]
    if arguments.footprint:
        footprints = {name: code_footprint(binary, env, arguments.url, arguments.requests, arguments.concurrency)
                      for name, env, binary in counted}
        print(f"{arguments.url} c{arguments.concurrency}: 64-byte lines of code run per request, steady state")
        print("| client | all | libcurl | libc | Swift (our code, runtime, Foundation) | other |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, _, _ in counted:
            lines = footprints[name]
            curl = sum(count for code_object, count in lines.items() if code_object.startswith("libcurl"))
            libc = lines.get("libc.so.6", 0)
            swift = sum(count for code_object, count in lines.items()
                        if code_object in ("brick-bench",) or code_object.startswith(("libswift", "libFoundation")))
            total = sum(lines.values())
            print(f"| {name} | {total} ({total * 64 // 1024} KiB) | {curl} | {libc} | {swift} | "
                  f"{total - curl - libc - swift} |")
        return
    if arguments.instructions:
        counts = {name: instructions_per_request(binary, env, arguments.url, arguments.requests,
                                                 arguments.concurrency)
                  for name, env, binary in counted}
        best = min(counts["C socket"], counts["C poll"])
        print(f"{arguments.url} c{arguments.concurrency}, steady state over {2 * arguments.requests} requests")
        print("| client | instructions / request | vs leaner C loop |")
        print("|---|---:|---:|")
        for name, _, _ in counted:
            print(f"| {name} | {counts[name] / 1000:.1f}k | {counts[name] / best:.3f} |")
        return

    build_keep_bodies()
    keeper = "C poll, keeps bodies, reused buffer"
    ratios = {name: [] for name, _, _ in MODES}
    kept = {name: [] for name, _, _ in MODES}
    cpus = {name: [] for name, _, _ in MODES}
    for _ in range(arguments.rounds):
        results = {name: run(binary, env, arguments.url, arguments.requests, arguments.concurrency)
                   for name, env, binary in MODES}
        best = max(results["C socket"][0], results["C poll"][0])
        for name, (rps, cpu) in results.items():
            ratios[name].append(rps / best)
            kept[name].append(rps / results[keeper][0])
            cpus[name].append(cpu)

    print(f"{arguments.url} x{arguments.requests} c{arguments.concurrency}, {arguments.rounds} interleaved rounds")
    print("| client | rps vs faster C peer | rps vs C keeping bodies | CPU ms / 1k req |")
    print("|---|---:|---:|---:|")
    for name, _, _ in MODES:
        print(f"| {name} | {statistics.median(ratios[name]):.2f} | {statistics.median(kept[name]):.2f} | "
              f"{statistics.median(cpus[name]):.1f} |")
    print("Ratios: medians over the rounds of each client's rps / the other client's rps in the same round. "
          "CPU: median.")

if __name__ == "__main__":
    main()
