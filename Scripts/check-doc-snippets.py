#!/usr/bin/env python3
"""Type-checks every Swift snippet of the DocC articles and of the README against the built modules,
so that a doc that drifts from the API fails CI.

    Scripts/check-doc-snippets.py [--build-dir .build/debug]

Needs `swift build` (or `swift build --build-tests`) first: it reads the modules there. Each article's
snippets are put together, in order, in one file compiled as top-level code (the snippets of an
article build on each other: a type declared in one is used in the next), after
`Scripts/doc-snippets/Prelude.swift`, a module of its own holding what the articles take for granted
(`Session.api`, `RecordSale`, …; an article's own declaration of the same name wins). A snippet
preceded by `<!-- snippet: skip: reason -->` is not compiled (say why); one preceded by
`<!-- snippet: alone -->` is compiled by itself, after the prelude; one preceded by
`<!-- snippet: member -->` is a member of an endpoint (`var autoRetryConfiguration …`), compiled
inside a GET endpoint of its own. The README's snippets each stand for a section of their own: each
is compiled alone, unless marked `<!-- snippet: continues -->` (appended to the one before).
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!--\s*snippet:\s*(?P<mark>[^>]*?)\s*-->\s*\n)?```swift\n(?P<code>.*?)```", re.S)


def include_flags(build_dir):
    flags = ["-I", os.path.join(build_dir, "Modules")]
    for name in ("CCurl", "CNetlink", "CRuntimeHook", "CZlib"):
        flags += ["-I", os.path.join(ROOT, "Sources", name)]
    # The C modules of the dependencies: their own module maps, and those SwiftPM generates.
    # Checkouts: this package's own, or (in a package that depends on BrickRequest) the ones beside
    # the build directory given (.build/debug → .build/checkouts).
    # The first that exists: two sets of the same module maps would redefine each module.
    candidates = [os.path.normpath(os.path.join(build_dir, "..", "checkouts")),
                  os.path.normpath(os.path.join(build_dir, "..", "..", "checkouts")), os.path.join(ROOT, ".build", "checkouts")]
    checkouts = next((directory for directory in candidates if os.path.isdir(directory)), None)
    maps = glob.glob(os.path.join(checkouts, "**", "module.modulemap"), recursive=True) if checkouts else []
    maps += glob.glob(os.path.join(build_dir, "*.build", "module.modulemap"))
    for directory in sorted({os.path.dirname(path) for path in maps}):
        flags += ["-I", directory]
    return flags


def snippets(path):
    text = open(path).read()
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1
        yield (match.group("mark") or "").strip(), match.group("code"), line


def compile_source(name, source, flags, prelude_dir, lines):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "main.swift")
        with open(path, "w") as file:
            file.write(source)
        done = subprocess.run(
            ["swiftc", "-typecheck", "-swift-version", "6", "-I", prelude_dir, *flags, path],
            capture_output=True, text=True)
    if done.returncode == 0:
        return True
    # Point each error at the article's line.
    for error in re.finditer(r"main\.swift:(\d+):\d+: error: (.*)", done.stderr):
        generated = int(error.group(1))
        origin = next(((article, line + generated - start) for start, end, article, line in lines
                       if start <= generated < end), (name, 0))
        print(f"{origin[0]}:{origin[1]}: error: {error.group(2)}")
    if not re.search(r"main\.swift:\d+:\d+: error", done.stderr):
        print(done.stderr[-3000:])
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=os.path.join(ROOT, ".build", "debug"))
    arguments = parser.parse_args()
    flags = include_flags(arguments.build_dir)
    prelude_dir = tempfile.mkdtemp()
    prelude = os.path.join(ROOT, "Scripts", "doc-snippets", "Prelude.swift")
    built = subprocess.run(
        ["swiftc", "-emit-module", "-swift-version", "6", "-module-name", "DocPrelude", "-parse-as-library",
         "-emit-module-path", os.path.join(prelude_dir, "DocPrelude.swiftmodule"), *flags, prelude],
        capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"the prelude does not build:\n{built.stderr}")
    articles = sorted(glob.glob(os.path.join(ROOT, "Sources", "*", "Docs.docc", "*.md")))
    # Pages outside DocC, where each snippet stands alone (unless marked `continues`): the README,
    # the guide and the other pages it sends readers to.
    pages = ["README.md", "CONTRIBUTING.md", os.path.join("Benchmarks", "README.md")]
    pages += sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    articles += [os.path.join(ROOT, page) for page in pages]
    failed = checked = skipped = 0
    for article in articles:
        name = os.path.relpath(article, ROOT)
        header = "import DocPrelude\n"
        together, lines, alone = [header], [], []
        offset = header.count("\n") + 1
        for mark, code, line in snippets(article):
            if mark.startswith("skip"):
                skipped += 1
                continue
            checked += 1
            if mark == "continues" and alone:
                previous, start = alone[-1]
                alone[-1] = (previous + code, start)
                continue
            if mark == "alone" or name in pages:
                alone.append((code, line))
                continue
            if mark == "member":
                # Inside an endpoint of its own; the wrapper's first line is not the snippet's.
                code = (f"final class MemberSnippet{line}: Component, GETRequestType {{\n"
                        f"    var urlString: String {{ \"https://api.example.com\" }}\n{code}}}\n")
                line -= 2
            lines.append((offset, offset + code.count("\n"), name, line))
            together.append(code)
            offset += code.count("\n")
        if len(together) > 1 and not compile_source(name, "".join(together), flags, prelude_dir, lines):
            failed += 1
        for code, line in alone:
            span = [(header.count("\n") + 1, header.count("\n") + 1 + code.count("\n"), name, line)]
            if not compile_source(name, header + code, flags, prelude_dir, span):
                failed += 1
    print(f"doc snippets: {checked} checked in {len(articles) - len(pages)} articles and {len(pages)} pages, {skipped} skipped, {failed} failing")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
