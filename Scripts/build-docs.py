#!/usr/bin/env python3
"""Builds the API reference of every library product with DocC, warnings treated as errors.

    Scripts/build-docs.py [--build-dir .build/debug] [--output .build/docs] [--static-hosting]
    Scripts/build-docs.py --preview BrickRequest     # then open http://localhost:8080/documentation/brickrequest

In a package that depends on BrickRequest, from that package's directory after its `swift build`:

    python3 .build/checkouts/BrickRequest/Scripts/build-docs.py      # or the path of a local checkout

documents the products that package builds (the others are named and skipped), into
.build/brickrequest-docs.

Needs `swift build` first (it reads the built modules). For each product it extracts the symbol
graph of the module users import — with the modules it re-exports: `import BrickRequest` shows
BrickRequestCore, BrickCurl and BrickNetlink, `import BrickOffline` BrickOfflineCore and
BrickOfflineSQLite — and converts it with the product's catalog (its articles) into
OUTPUT/NAME.doccarchive. A broken symbol link, an unknown parameter name or a missing page fails
the run, naming the place.

(swift-docc-plugin's `generate-documentation` renders a module's own symbols only: for an
umbrella such as BrickRequest that is five declarations, the rest being re-exported. This script
passes the symbol graph extractor the re-exported modules instead.)
"""
import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# product module → the modules it re-exports (their symbols are documented as its own).
PRODUCTS = {
    "BrickRequest": ["BrickRequestCore", "BrickCurl", "BrickNetlink"],
    "BrickTesting": [],
    "BrickHAR": [],
    "BrickQueueConsole": [],
    "BrickOffline": ["BrickOfflineCore", "BrickOfflineSQLite"],
    "BrickOfflinePostgres": ["BrickOfflineCore"],
    "BrickOpenAPI": [],
    "BrickMetrics": [],
    "BrickTracing": [],
    "BrickLifecycle": [],
    "BrickOfflineMetrics": [],
}

spec = importlib.util.spec_from_file_location("doc_snippets", os.path.join(ROOT, "Scripts", "check-doc-snippets.py"))
doc_snippets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc_snippets)


def symbol_graphs(module, reexported, flags, directory):
    command = [
        "swift-symbolgraph-extract", "-module-name", module, "-target", "x86_64-unknown-linux-gnu",
        "-output-dir", directory, "-minimum-access-level", "public", "-skip-inherited-docs",
    ]
    if reexported:
        command.append("-experimental-allowed-reexported-modules=" + ",".join(reexported))
    done = subprocess.run(command + [f for f in flags if f != "-swift-version"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"build-docs: {module}: symbol graph extraction failed:\n{done.stderr[-3000:]}")


def convert(module, graphs, output, static_hosting, preview):
    catalog = os.path.join(ROOT, "Sources", module, "Docs.docc")
    command = ["docc", "preview" if preview else "convert"]
    if os.path.isdir(catalog):
        command.append(catalog)
    command += [
        "--additional-symbol-graph-dir", graphs,
        "--fallback-display-name", module,
        "--fallback-bundle-identifier", "brickrequest." + module.lower(),
        "--output-path", os.path.join(output, module + ".doccarchive"),
    ]
    if not preview:
        command.append("--warnings-as-errors")
    if static_hosting and not preview:
        command += ["--transform-for-static-hosting", "--hosting-base-path", module.lower()]
    if preview:
        os.execvp(command[0], command)
    done = subprocess.run(command, capture_output=True, text=True)
    # Each diagnostic with the line that says where (` --> FILE:LINE:COLUMN`).
    lines = (done.stdout + done.stderr).splitlines()
    problems = []
    for number, line in enumerate(lines):
        if line.startswith(("warning:", "error:")):
            place = next((l.strip() for l in lines[number + 1:number + 3] if l.strip().startswith("-->")), "")
            problems.append(f"{module}: {line} {place}")
    if done.returncode != 0 or problems:
        print("\n".join(problems[:80]) or done.stderr[-3000:])
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Run from this checkout: its own build. Run from a package that depends on it: that package's.
    here = os.getcwd()
    consumer = os.path.realpath(here) != os.path.realpath(ROOT) and os.path.isdir(os.path.join(here, ".build", "debug"))
    parser.add_argument("--build-dir", default=os.path.join(here if consumer else ROOT, ".build", "debug"))
    parser.add_argument("--output", default=os.path.join(here, ".build", "brickrequest-docs") if consumer else os.path.join(ROOT, ".build", "docs"))
    parser.add_argument("--static-hosting", action="store_true")
    parser.add_argument("--preview", metavar="PRODUCT")
    parser.add_argument("--products", metavar="A,B", help="only these products (default: every one built)")
    arguments = parser.parse_args()
    flags = doc_snippets.include_flags(arguments.build_dir)
    products = {arguments.preview: PRODUCTS[arguments.preview]} if arguments.preview else PRODUCTS
    if arguments.products:
        products = {name: PRODUCTS[name] for name in arguments.products.split(",")}
    # A package that depends on BrickRequest builds some products, not all: those are documented.
    modules = os.path.join(arguments.build_dir, "Modules")
    built = {module: reexported for module, reexported in products.items()
             if all(os.path.exists(os.path.join(modules, name + ".swiftmodule")) for name in [module] + reexported)}
    skipped = sorted(set(products) - set(built))
    if not built:
        print(f"build-docs: no product of BrickRequest is built in {arguments.build_dir}: run swift build first")
        return 1
    products = built
    os.makedirs(arguments.output, exist_ok=True)
    failed = []
    for module, reexported in products.items():
        with tempfile.TemporaryDirectory(prefix="brick-docs-") as graphs:
            symbol_graphs(module, reexported, flags, graphs)
            # Symbols of other packages extended by this module (`BrickRequest@Swift`) are not ours to document.
            for name in os.listdir(graphs):
                if "@" in name and name.split("@")[1].split(".")[0] not in reexported:
                    os.remove(os.path.join(graphs, name))
            if not convert(module, graphs, arguments.output, arguments.static_hosting, bool(arguments.preview)):
                failed.append(module)
    if failed:
        print(f"build-docs: warnings or errors in {', '.join(failed)}")
        return 1
    print(f"build-docs: {len(products)} product{'' if len(products) == 1 else 's'} documented in {arguments.output}, no warning"
          + (f"; not built here, skipped: {', '.join(skipped)}" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
