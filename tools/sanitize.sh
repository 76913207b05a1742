#!/usr/bin/env bash
# The whole test suite under AddressSanitizer (LeakSanitizer on) and UndefinedBehavior-
# Sanitizer: configures and builds a second tree with -DDLUA_SANITIZE=address,undefined
# (Debug, -O1), then runs its ctest. Any sanitizer report fails the test that made it
# (UBSan does not recover; ASan and LSan exit non-zero); the options and the
# suppressions are in tests/sanitize/ and apply to every test of that tree.
#
#   tools/sanitize.sh                  # build-asan/, then its whole ctest
#   tools/sanitize.sh DIR [ctest args] # another tree; e.g. -R fuzz to run some tests
#
# The main test suite runs this as one test ("sanitizers: ..."), so CI runs it.
# DLUA_SANITIZE_JOBS sets the build and ctest parallelism (default: the core count).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-asan}
shift || true
jobs=${DLUA_SANITIZE_JOBS:-$(nproc)}

if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1: ASan's own advice (fast enough, and frames and variables still make sense).
  # The nested tree must not register this test again (DLUA_SANITIZER_SUITE=OFF).
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
        -DDLUA_SANITIZE=address,undefined -DDLUA_SANITIZER_SUITE=OFF -DDLUA_CUDA=OFF
fi
cmake --build "$build" -j "$jobs"
# The tree's tests get the sanitizer options from tests/sanitize/sanitize.cmake.
exec ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
