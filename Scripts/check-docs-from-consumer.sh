#!/bin/bash
# Builds part of the API reference as a package that depends on BrickRequest does: from another
# directory, whose .build/debug holds only some products' modules (here: not BrickOffline's).
# build-docs.py must document what is built, name what is not, and write into that package's
# .build/brickrequest-docs. Needs `swift build` first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
consumer=$(mktemp -d)
trap 'rm -rf "$consumer"' EXIT
mkdir -p "$consumer/.build/debug/Modules"
for module in "$root"/.build/debug/Modules/*.swiftmodule; do
    case "$(basename "$module")" in BrickOffline.swiftmodule) continue ;; esac
    ln -s "$module" "$consumer/.build/debug/Modules/"
done
for built in "$root"/.build/debug/*.build; do ln -s "$built" "$consumer/.build/debug/"; done
ln -s "$root/.build/checkouts" "$consumer/.build/checkouts"
output=$(cd "$consumer" && python3 "$root/Scripts/build-docs.py" --products BrickTesting,BrickOffline 2>&1)
echo "$output"
grep -q "1 product documented in $consumer/.build/brickrequest-docs, no warning; not built here, skipped: BrickOffline" <<<"$output"
test -d "$consumer/.build/brickrequest-docs/BrickTesting.doccarchive"
echo "check-docs-from-consumer: a consumer's build documents what it built and names the rest"
