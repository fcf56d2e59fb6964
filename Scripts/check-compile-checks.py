#!/usr/bin/env python3
"""Type-checks each file of Scripts/compile-checks/ against the modules `swift build` made, and
holds it to what its first line says:

    // expect: compiles          it must type-check (every spelling users write of a
                                 customisation point compiles, and the tests prove it is used);
    // expect-error: TEXT        it must fail, with an error containing TEXT (a misuse is caught at
                                 compile time, never silently ignored).

    Scripts/check-compile-checks.py [--build-dir .build/debug]

Needs `swift build` (or `swift build --build-tests`) first. Exit status 1 when any file is not
held to its line; each such file is named with the compiler's first error.
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
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
