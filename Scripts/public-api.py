#!/usr/bin/env python3
"""Counts the public API: the `public`/`open` declarations of each module in Sources/, with those
behind `@_spi(...)` apart, and the top-level public types.

    python3 Scripts/public-api.py                      # the table
    python3 Scripts/public-api.py --list MODULE        # every public declaration of MODULE
    python3 Scripts/public-api.py --max-products N --max-core M   # fail when over (for CI)

"Products" totals the library products a user builds against, outside the test doubles
(BrickTesting, BrickTestServer); "core" is what `import BrickRequest` shows: the umbrella and the
modules it re-exports (BrickRequestCore, BrickCurl, BrickNetlink). A declaration is a
line that declares with `public` or `open` (extensions themselves are not counted; their members
are). Comments and string literals are skipped.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEST_DOUBLES = {"BrickTesting", "BrickTestServer"}
CORE = "BrickRequest"
# The modules `import BrickRequest` re-exports, with itself.
CORE_MODULES = {"BrickRequest", "BrickRequestCore", "BrickCurl", "BrickNetlink"}

MODIFIERS = r"(?:final|static|class|override|convenience|nonisolated|mutating|nonmutating|required|indirect|lazy|dynamic|weak|unowned|consuming|borrowing|distributed)"
KEYWORDS = r"(?:func|var|let|init|struct|class|enum|protocol|typealias|actor|subscript|case|associatedtype|macro|deinit)"
DECLARATION = re.compile(
    r"^\s*(?P<attributes>(?:@[A-Za-z_]+(?:\([^)]*\))?\s+)*)(?:public|open)(?:\([a-z]+\))?\s+(?:" + MODIFIERS + r"\s+)*(?P<keyword>" + KEYWORDS + r")\b(?P<rest>.*)"
)
SPI = re.compile(r"@_spi\(")


def declarations(path):
    """(line number, is SPI, is top-level type, text) for each public declaration of a file."""
    text = path.read_text(encoding="utf-8")
    # Block comments out, keeping line numbers.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    previous = ""
    depth = 0
    for number, line in enumerate(text.split("\n"), 1):
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line.split("//")[0] if "//" in line and '"' not in line else line)
        match = DECLARATION.match(code)
        if match:
            # An attribute on a line of its own counts for the declaration below it (an import does not).
            attribute_line = previous.strip().startswith("@") and not re.search(r"\bimport\b", previous)
            spi = bool(SPI.search(match.group("attributes"))) or (attribute_line and bool(SPI.search(previous)))
            top_type = depth == 0 and match.group("keyword") in {"struct", "class", "enum", "protocol", "actor", "typealias"}
            yield number, spi, top_type, line.strip()
        depth += code.count("{") - code.count("}")
        if code.strip():
            previous = code


def modules():
    for directory in sorted((ROOT / "Sources").iterdir()):
        files = sorted(directory.rglob("*.swift"))
        if files:
            yield directory.name, files


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", metavar="MODULE")
    parser.add_argument("--max-products", type=int)
    parser.add_argument("--max-core", type=int)
    arguments = parser.parse_args()

    rows = []
    for name, files in modules():
        found = [(file, *d) for file in files for d in declarations(file)]
        if arguments.list == name:
            for file, number, spi, _, text in found:
                print(f"{file.relative_to(ROOT)}:{number}: {'[spi] ' if spi else ''}{text}")
            return 0
        public = sum(1 for d in found if not d[2])
        spi = sum(1 for d in found if d[2])
        types = sum(1 for d in found if d[3] and not d[2])
        rows.append((name, public, spi, types))

    print(f"{'module':<24}{'public':>8}{'@_spi':>8}{'types':>8}")
    for name, public, spi, types in rows:
        if public or spi:
            print(f"{name:<24}{public:>8}{spi:>8}{types:>8}")
    products = sum(r[1] for r in rows if r[0] not in TEST_DOUBLES)
    core = sum(r[1] for r in rows if r[0] in CORE_MODULES)
    print(f"library products outside the test doubles: {products}; what `import {CORE}` shows: {core}")
    failed = False
    if arguments.max_products is not None and products > arguments.max_products:
        print(f"public-api: {products} public declarations across the products, over {arguments.max_products}")
        failed = True
    if arguments.max_core is not None and core > arguments.max_core:
        print(f"public-api: {core} public declarations shown by `import {CORE}`, over {arguments.max_core}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
