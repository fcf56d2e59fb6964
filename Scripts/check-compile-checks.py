#!/usr/bin/env python3
"""Type-checks each file of Scripts/compile-checks/ against the modules `swift build` made, and
holds it to what its first line says:

    // expect: compiles          it must type-check (every spelling users write of a
                                 customisation point compiles, and the tests prove it is used);
    // expect-error: TEXT        it must fail, with an error containing TEXT (a misuse is caught at
                                 compile time, never silently ignored).

    Scripts/check-compile-checks.py [--build-dir .build/debug]

It then type-checks every target of the Benchmarks package the same way (its files together, as a
module of its own, warnings included): CI does not build that package (release, with the peers'
dependencies), and every module it imports is built here, so an API change cannot break
brick-bench, offline-bench, cache-bench or fleet-bench unseen.

Needs `swift build --build-tests` first. Exit status 1 when any file is not held to its line or a
benchmark does not type-check cleanly; each is named with the compiler's first diagnostics.
"""
import argparse
import glob
import importlib.util
import os
import subprocess
import sys
import tempfile

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
    failures = 0
    files = sorted(glob.glob(os.path.join(ROOT, "Scripts", "compile-checks", "*.swift")))
    for path in files:
        name = os.path.relpath(path, ROOT)
        first = open(path).readline().strip()
        with tempfile.TemporaryDirectory() as directory:
            main_file = os.path.join(directory, "main.swift")
            with open(main_file, "w") as file:
                file.write(open(path).read())
            done = subprocess.run(
                ["swiftc", "-typecheck", "-swift-version", "6", *flags, main_file],
                capture_output=True, text=True)
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        if first == "// expect: compiles":
            if done.returncode != 0:
                failures += 1
                print(f"{name}: expected to compile; {errors[0] if errors else done.stderr.strip()[:300]}")
        elif first.startswith("// expect-error:"):
            expected = first[len("// expect-error:"):].strip()
            if done.returncode == 0:
                failures += 1
                print(f"{name}: expected an error containing {expected!r}; it compiled")
            elif expected not in done.stderr:
                failures += 1
                print(f"{name}: expected an error containing {expected!r}; got {errors[0] if errors else done.stderr.strip()[:300]}")
        else:
            failures += 1
            print(f"{name}: its first line must be `// expect: compiles` or `// expect-error: TEXT`")
    print(f"compile checks: {len(files) - failures} of {len(files)} held")
    return 1 if failures + check_benchmarks(flags) else 0


def check_benchmarks(flags):
    """Type-checks each target of Benchmarks/Sources; returns how many did not type-check cleanly."""
    targets = sorted(path for path in glob.glob(os.path.join(ROOT, "Benchmarks", "Sources", "*")) if os.path.isdir(path))
    failures = 0 if targets else 1
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
    return failures


if __name__ == "__main__":
    sys.exit(main())
