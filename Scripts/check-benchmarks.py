#!/usr/bin/env python3
"""Type-checks every target of the Benchmarks package against the modules `swift build` made.

    Scripts/check-benchmarks.py [--build-dir .build/debug]

The benchmarks are a package of their own (built in release, with the peers' dependencies), which
CI does not build: a change to the library's API could break `brick-bench`, `offline-bench`,
`cache-bench` or `fleet-bench` unseen until the next measurement. Every module they import is
built by the main package's `swift build --build-tests`, so each target is type-checked here in
seconds, as a module of its own (its files together, strict concurrency, Swift 6), warnings
included: a benchmark is held to the house's rules too.

Needs `swift build --build-tests` first. Exit status 1 when a target does not type-check cleanly;
the compiler's diagnostics are printed.
"""
import argparse
import glob
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The include flags of the modules, as the doc-snippet check computes them.
spec = importlib.util.spec_from_file_location("doc_snippets", os.path.join(ROOT, "Scripts", "check-doc-snippets.py"))
doc_snippets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc_snippets)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=os.path.join(ROOT, ".build", "debug"))
    args = parser.parse_args()
    flags = doc_snippets.include_flags(args.build_dir)
    targets = sorted(path for path in glob.glob(os.path.join(ROOT, "Benchmarks", "Sources", "*")) if os.path.isdir(path))
    if not targets:
        print("benchmarks: no targets found under Benchmarks/Sources")
        return 1
    failures = 0
    for target in targets:
        name = os.path.basename(target)
        files = sorted(glob.glob(os.path.join(target, "**", "*.swift"), recursive=True))
        done = subprocess.run(
            ["swiftc", "-typecheck", "-swift-version", "6", "-module-name", name, *flags, *files],
            capture_output=True, text=True)
        diagnostics = [line for line in done.stderr.splitlines() if " error: " in line or " warning: " in line]
        if done.returncode != 0 or diagnostics:
            failures += 1
            print(f"benchmarks: {name} does not type-check cleanly:")
            print("\n".join(diagnostics[:20]) if diagnostics else done.stderr.strip()[:2000])
    print(f"benchmarks: {len(targets) - failures} of {len(targets)} targets type-check")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
