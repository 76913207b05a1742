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

# OpenBLAS's core type is the same for every side (ours, the C reference and PyTorch all
# load this one OpenBLAS). Debian's OpenBLAS 0.3.21 does not recognise some newer CPUs
# and falls back to its generic Prescott kernels (5-25x slower GEMM); dlua then picks the
# core for the CPU's instruction set itself (Note [Choosing OpenBLAS's core] in
# tensor/cpu/openblas.cpp), and the other sides are given the same one here.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  read -r core by < <("$build/bin/dlua" -e 'local b = dl.config().blas; print(b.core, b.chosen_by)')
  if [ "$by" = "dlua" ]; then
    echo "bench: OpenBLAS fell back to a generic core; dlua chose $core, and so does every side" >&2
    export OPENBLAS_CORETYPE=$core
  fi
fi
exec "$build/bin/dlua" bench/run.lua --ref "$build/bin/dlua_bench_ref" "$@"
