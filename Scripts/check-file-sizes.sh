#!/usr/bin/env bash
# No Swift file in Sources over 450 lines without a one-line reason at its top ("// Over 450 lines: …").
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS= read -r file; do
    lines=$(wc -l < "$file")
    if [ "$lines" -gt 450 ] && ! head -1 "$file" | grep -q "^// Over 450 lines: "; then
        echo "check-file-sizes: $file has $lines lines and no reason at its top"
        status=1
    fi
done < <(find Sources -name '*.swift' | sort)
[ "$status" -eq 0 ] && echo "check-file-sizes: every file over 450 lines says why"
exit "$status"
