#!/usr/bin/env python3
"""Checks what each library target builds: the promises the products make about their dependencies.

    Scripts/check-build-closures.py

Reads `swift package describe --type json` and follows target dependencies (within this package)
to the products of other packages each target builds. A user of `BrickRequest` alone never builds
GRDB, postgres-nio, swift-metrics, …; a PostgreSQL worker (`BrickOfflinePostgres`, the lifecycle
services, the offline metrics) never builds GRDB. Fails naming the target and the path that pulls
the forbidden product in.

The tools are checked through their dependencies' own manifests too (`swift package dump-package`
of each checkout under .build/checkouts, resolved first): `brick-queue`, for a service on SQLite,
must reach no PostgreSQL client and no BoringSSL in any package; `brick-queue-postgres` no GRDB.
"""
import json
import os
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
    "BrickQueue": {"PostgresNIO", "NIOSSL"},
    "BrickQueuePostgres": {"GRDB"},
}
# target → modules it must never build, in any package (followed through every dependency's manifest).
FORBIDDEN_MODULES = {
    "BrickQueue": {"PostgresNIO", "NIOSSL", "CNIOBoringSSL", "CCryptoBoringSSL", "BrickOfflinePostgres"},
    "BrickQueuePostgres": {"GRDB", "BrickOfflineSQLite"},
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
    failures += check_modules()
    for failure in failures:
        print(f"check-build-closures: {failure}")
    if failures:
        sys.exit(1)
    count = len(FORBIDDEN) + len(FORBIDDEN_TARGETS) + len(FORBIDDEN_MODULES)
    print(f"check-build-closures: {count} targets build only what they promise")


class Manifests:
    """Each package's manifest (`dump-package`), this one's and its checkouts', by identity."""

    def __init__(self):
        self.cache = {}
        checkouts = os.path.join(".build", "checkouts")
        self.paths = {name.lower(): os.path.join(checkouts, name) for name in os.listdir(checkouts)} if os.path.isdir(checkouts) else {}
        if not self.paths:
            raise SystemExit("check-build-closures: no .build/checkouts (run swift package resolve first)")
        self.paths[""] = "."

    def get(self, identity):
        identity = identity.lower()
        if identity not in self.cache:
            path = self.paths.get(identity) or self.paths.get(identity + ".swift")
            if path is None:
                # Not resolved, so never built (a dependency behind a trait that nothing enables).
                self.cache[identity] = None
                return None
            dumped = subprocess.run(
                ["swift", "package", "dump-package", "--package-path", path], capture_output=True, text=True, check=True
            ).stdout
            self.cache[identity] = json.loads(dumped)
        return self.cache[identity]

    def dependency_identities(self, identity):
        """Identities of the packages `identity` depends on (a product's package is named by identity)."""
        found = []
        for dependency in self.get(identity)["dependencies"]:
            for kind in dependency.values():
                found.append(kind[0]["identity"])
        return found


def applies(condition):
    """A dependency built on Linux: no condition, Linux among its platforms; trait conditions count as on."""
    if not condition:
        return True
    platforms = condition.get("platformNames") or []
    return not platforms or "linux" in platforms


def check_modules():
    """Follows each tool's target through every package's manifest; returns the forbidden modules reached."""
    manifests = Manifests()
    failures = []
    for root, forbidden in FORBIDDEN_MODULES.items():
        start = ("", root)
        paths = {start: [root]}
        queue = [start]
        while queue:
            identity, name = queue.pop(0)
            manifest = manifests.get(identity)
            targets = {target["name"]: target for target in manifest["targets"]}
            reached = []
            for dependency in targets[name]["dependencies"]:
                (kind, value), = dependency.items()
                if not applies(value[-1]):
                    continue
                if kind == "target" or (kind == "byName" and value[0] in targets):
                    reached.append((identity, value[0]))
                    continue
                # A product: of the named package, or (by name) of whichever dependency has it.
                candidates = [value[1]] if kind == "product" and value[1] else manifests.dependency_identities(identity)
                for candidate in candidates:
                    if manifests.get(candidate) is None:
                        continue
                    product = next((p for p in manifests.get(candidate)["products"] if p["name"] == value[0]), None)
                    if product:
                        reached += [(candidate.lower(), target) for target in product["targets"]]
                        break
            for next_ in reached:
                if next_ in paths:
                    continue
                paths[next_] = paths[(identity, name)] + [next_[1]]
                if next_[1] in forbidden:
                    failures.append(f"{root} builds {next_[1]}: {' → '.join(paths[next_])}")
                queue.append(next_)
    return failures


if __name__ == "__main__":
    main()
