#!/bin/sh
# Regenerates the client that tests BrickOpenAPI from Tests/BrickOpenAPITests/openapi.yaml, with
# swift-openapi-generator 1.14.3 built in a scratch directory (CI never builds the generator: the
# output is committed).
#
#   Scripts/generate-openapi-client.sh [GENERATOR_CHECKOUT]
#
# GENERATOR_CHECKOUT: a clone of apple/swift-openapi-generator at 1.14.3 (default: cloned from
# https://github.com/apple/swift-openapi-generator into a temporary directory).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
checkout=${1:-}
if [ -z "$checkout" ]; then
    checkout=$(mktemp -d)/swift-openapi-generator
    git clone -q --branch 1.14.3 https://github.com/apple/swift-openapi-generator "$checkout"
fi
(cd "$checkout" && swift build --product swift-openapi-generator)
tests="$root/Tests/BrickOpenAPITests"
rm -rf "$tests/Generated"
"$checkout/.build/debug/swift-openapi-generator" generate "$tests/openapi.yaml" \
    --config "$tests/openapi-generator-config.yaml" --output-directory "$tests/Generated"
echo "regenerated $tests/Generated"
