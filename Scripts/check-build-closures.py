#!/usr/bin/env python3
"""Checks what each library target builds: the promises the products make about their dependencies.

    Scripts/check-build-closures.py

Reads `swift package describe --type json` and follows target dependencies (within this package)
to the products of other packages each target builds. A user of `BrickRequest` alone never builds
GRDB, postgres-nio, swift-metrics, …; a PostgreSQL worker (`BrickOfflinePostgres`, the lifecycle
services, the offline metrics) never builds GRDB. Fails naming the target and the path that pulls
the forbidden product in.
"""
import json
import subprocess
import sys

# target → products of other packages it must never build (directly or through its dependencies).
FORBIDDEN = {
    "BrickRequest": {"GRDB", "PostgresNIO", "NIOSSL", "CoreMetrics", "Tracing", "OpenAPIRuntime", "ServiceLifecycle"},
    "BrickOfflineCore": {"GRDB", "PostgresNIO", "NIOSSL", "ServiceLifecycle"},
    "BrickOfflinePostgres": {"GRDB"},
    "BrickLifecycle": {"GRDB", "PostgresNIO"},
    "BrickOfflineMetrics": {"GRDB", "PostgresNIO"},
    "OutboxWorker": {"GRDB"},
    "BrickOffline": {"PostgresNIO", "ServiceLifecycle"},
}
# target → targets of this package it must never build: the core names no transport and imports no C.
FORBIDDEN_TARGETS = {
    "BrickRequestCore": {"CCurl", "CNetlink", "CRuntimeHook", "CZlib", "BrickCurl", "BrickNetlink"},
}


def main():
    described = subprocess.run(
        ["swift", "package", "describe", "--type", "json"], capture_output=True, text=True, check=True
    ).stdout
    targets = {target["name"]: target for target in json.loads(described)["targets"]}
    failures = []
    for root, forbidden in FORBIDDEN_TARGETS.items():
        reached, queue = {root: [root]}, [root]
        while queue:
            name = queue.pop(0)
            for dependency in targets.get(name, {}).get("target_dependencies", []):
                if dependency in forbidden:
                    failures.append(f"{root} builds {dependency}: {' → '.join(reached[name] + [dependency])}")
                if dependency in targets and dependency not in reached:
                    reached[dependency] = reached[name] + [dependency]
                    queue.append(dependency)
    for root, forbidden in FORBIDDEN.items():
        if root not in targets:
            failures.append(f"{root}: no such target")
            continue
        # Breadth first, keeping the path to each target reached.
        paths = {root: [root]}
        queue = [root]
        while queue:
            name = queue.pop(0)
            target = targets[name]
            for product in target.get("product_dependencies", []):
                if product in forbidden:
                    failures.append(f"{root} builds {product}: {' → '.join(paths[name] + [product])}")
            for dependency in target.get("target_dependencies", []):
                if dependency in targets and dependency not in paths:
                    paths[dependency] = paths[name] + [dependency]
                    queue.append(dependency)
    for failure in failures:
        print(f"check-build-closures: {failure}")
    if failures:
        sys.exit(1)
    print(f"check-build-closures: {len(FORBIDDEN) + len(FORBIDDEN_TARGETS)} targets build only what they promise")


if __name__ == "__main__":
    main()
