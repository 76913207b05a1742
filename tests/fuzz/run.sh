#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz/README.md) for a bounded time each.
#
#   tests/fuzz/run.sh                     # every target, 60 s each
#   tests/fuzz/run.sh -t 3600 ops idx     # these targets, an hour each
#   tests/fuzz/run.sh --merge             # then fold new coverage into the corpora
#
# Needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev). Builds build-fuzz/
# (clang, -DDLUA_FUZZ=ON, ASan+UBSan) once, copies each committed corpus to a scratch
# corpus there, and fuzzes at low priority (nice 19) with one process per target, all
# targets at once, each for the time given.
# Crashes land in build-fuzz/artifacts/<target>/; each one becomes a regression input
# in tests/fuzz/regressions/<target>/ (and a fix). --merge adds to
# tests/fuzz/corpus/<target>/ only the inputs that bring new coverage (libFuzzer
# -merge=1), which keeps the committed corpora small.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${DLUA_FUZZ_BUILD:-$src/build-fuzz}
seconds=60
merge=0
targets=()
while (($#)); do
  case "$1" in
    -t) seconds=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(ops breadth spectra safetensors idx image checkpoint)

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
    -DDLUA_FUZZ=ON -DDLUA_SANITIZE=address,undefined -DDLUA_WERROR=OFF \
    -DDLUA_SANITIZER_SUITE=OFF -DDLUA_CUDA=OFF
fi
nice -n 19 cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

# The engine's threads would only make each input slower here.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$src/tests/sanitize/lsan.supp:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
# One process per target, all at once: each runs for the whole time given.
fuzz_one() {
  local t=$1 corpus=$build/corpus/$1 artifacts=$build/artifacts/$1
  mkdir -p "$corpus" "$artifacts"
  cp -n "$src/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  local dict=()
  [ -f "$src/tests/fuzz/$t.dict" ] && dict=(-dict="$src/tests/fuzz/$t.dict")
  # The checkpoint target keeps one Lua state across inputs, and LuaJIT's tagged
  # pointers (the upper bits of a TValue) hide what that state holds from LeakSanitizer,
  # so libFuzzer's leak check after each input reports the Lua heap's growth as leaks.
  # Leaks are checked at exit instead, after the state is closed.
  [ "$t" = checkpoint ] && dict+=(-detect_leaks=0)
  echo "fuzz: $t for $seconds s (corpus $corpus, log $build/fuzz_$t.log)"
  # -timeout: an input slower than 60 s is reported (a hang or a quadratic path). It is
  # wall time, and at nice 19 on a busy machine an input of a second can wait 20 s for
  # a core (a false report seen here while a build ran).
  # -rss_limit_mb: the engine's tensor limit is 64 MB in fuzz_ops; 2 GB means a leak.
  TMPDIR=$build nice -n 19 "$build/bin/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=60 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" >"$build/fuzz_$t.log" 2>&1 || true
}
for t in "${targets[@]}"; do fuzz_one "$t" & done
wait

status=0
for t in "${targets[@]}"; do
  log=$build/fuzz_$t.log
  echo "fuzz: $t: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') inputs run," \
       "$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}')/s; coverage:" \
       "$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse)' "$log" | tail -1 | sed -E 's/^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+//')"
  if grep -qE "^==[0-9]+==ERROR|SUMMARY: |deadly signal|fuzz_[a-z]+: " "$log"; then
    echo "fuzz: $t FOUND A FAILURE; inputs in $build/artifacts/$t, log $log" >&2
    status=1
  fi
  if ((merge)); then
    "$build/bin/fuzz_$t" -merge=1 "$src/tests/fuzz/corpus/$t" "$build/corpus/$t" >/dev/null 2>&1
    echo "fuzz: merged; tests/fuzz/corpus/$t has $(ls "$src/tests/fuzz/corpus/$t" | wc -l) inputs"
  fi
done
exit $status
