#!/usr/bin/env bash
# Builds what the benchmarks need, then runs them all (bench/run.lua, which documents the
# options and the method; docs/performance.md shows the latest table).
#   bench/run.sh                     build/ (made by tools/setup.sh), every row
#   bench/run.sh BUILD_DIR [options] another build; options go to bench/run.lua
#   bench/run.sh build --rows matmul --reps 7 --out /tmp/table.md
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then build=$1; shift; fi
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target dlua dlua_bench_ref >/dev/null

# OpenBLAS's core type is the machine's choice and the same for every side (ours, the
# C reference and PyTorch all load this one OpenBLAS). Debian's OpenBLAS 0.3.21 does not
# recognise some newer CPUs and falls back to its generic Prescott kernels (about 25x
# slower GEMM than the Haswell ones on AVX2 machines); name the core then, for all sides.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo; then
  core=$(printf 'info\n' | "$build/bin/dlua_bench_ref" | sed -n 's/.*| \([A-Za-z0-9]*\) | openblas threads.*/\1/p')
  if [ "$core" = "Prescott" ]; then
    echo "bench: OpenBLAS fell back to Prescott on this AVX2 CPU; using OPENBLAS_CORETYPE=Haswell for every side" >&2
    export OPENBLAS_CORETYPE=Haswell
  fi
fi
exec "$build/bin/dlua" bench/run.lua --ref "$build/bin/dlua_bench_ref" "$@"
