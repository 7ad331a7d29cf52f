#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs the unit tests
# (Check), starts the local stack and runs the integration tests against it.
#   DEDUPD_KEEP_STACK=1   leave the stack running afterwards (default: stop it
#                         if this script started it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

echo "==> dependencies"
./scripts/deps.sh
echo "==> build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

echo "==> local stack"
started_stack=0
if ! ./scripts/stack.sh status >/dev/null 2>&1; then
  started_stack=1
fi
./scripts/stack.sh up
cleanup() {
  if [ "$started_stack" = 1 ] && [ "${DEDUPD_KEEP_STACK:-0}" != 1 ]; then
    ./scripts/stack.sh down || true
  fi
}
trap cleanup EXIT

echo "==> unit and integration tests"
# One ctest run: unit tests (label unit) and integration tests (label
# integration, against the stack).  ctest's closing line gives the counts.
ctest --test-dir build --output-on-failure -j1 --timeout 600
