#!/usr/bin/env bash
# Packs what the GPU checks need into one folder, for a machine that has a GPU and a
# CUDA driver but not the Debian packages dlua was built with (a lent GPU machine, a
# container): the built programs and libraries, the runtime libraries they link from
# the system (LuaJIT, OpenBLAS, libgfortran, libgomp, libedit, stb ...), and run.sh.
#
#   tools/gpu_bundle.sh [BUILD_DIR [OUT_DIR]]      # default build/ and gpu-bundle/
#   # move OUT_DIR (about 66 MB; 21 MB as a .tar.gz) to a checkout of the same commit on
#   # the GPU machine, then there, from the checkout's root:
#   OUT_DIR/run.sh [results_dir]
#
# run.sh runs, from the checkout's root: the CUDA op-table test
# (tests/gpu/test_cuda_ops.cpp); the Lua tests and docs whose blocks have CUDA branches;
# tools/gpu_smoke.lua (training, dl.compile, linalg, sorting, half precision, autocast
# and sequence layers on CUDA against the CPU); and tools/gpu_nccl.lua (dl.dist's NCCL
# backend on one GPU). bench/gpu.lua (against PyTorch) runs with the bundle's dlua too. The CUDA libraries (cuBLAS, cuSOLVER,
# NCCL) are the GPU machine's own: the toolkit in /usr/local/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-gpu-bundle}
[ -x "$build/bin/dlua_cuda_tests" ] || { echo "gpu_bundle: $build has no dlua_cuda_tests (built without CUDA?)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/lib" "$out/bin"
cp "$build/bin/dlua" "$build/bin/dlua_cuda_tests" "$out/bin/"
cp -P "$build"/lib/libdlua_core.so "$build"/lib/libdlua.so* "$build"/lib/libdlua_cuda.so "$out/lib/"
# The system libraries they need, except the C and C++ runtimes and CUDA's own (the
# toolkit's folder, and cuBLAS, cuSOLVER, NCCL wherever they are).
for f in "$out/bin/"* "$out/lib/"*.so; do ldd "$f" 2>/dev/null; done | awk '/=> \//{print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcu|libnccl|libnvJitLink' |
  grep -v -e "$(cd "$build/lib" && pwd)" | while read -r lib; do
    [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/"
  done
# OpenBLAS is loaded at the first product, not linked (tensor/cpu/openblas.cpp): the
# engine finds the bundle's copy as libopenblas.so.0 on LD_LIBRARY_PATH.
blas=$(pkg-config --variable=libdir openblas)/libopenblas.so.0
cp -L "$blas" "$out/lib/"
for lib in $(ldd "$blas" | awk '/=> \//{print $3}' | grep -E 'libgfortran|libquadmath'); do cp -L "$lib" "$out/lib/"; done
cat > "$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU checks, from the checkout's root (see tools/gpu_bundle.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
results=${1:-$here/results}
mkdir -p "$results"
export LD_LIBRARY_PATH=$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export DLUA_CUDA_PLUGIN=$here/lib/libdlua_cuda.so
status=0
command -v nvidia-smi > /dev/null && nvidia-smi -L
echo "== CUDA op-table test"
"$here/bin/dlua_cuda_tests" > "$results/cuda_tests.log" 2>&1
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || status=1   # 77: no device, skipped
tail -3 "$results/cuda_tests.log"
for doc in gpu design; do
  echo "== docs/$doc.md"
  "$here/bin/dlua" tests/docs/run_docs.lua docs/$doc.md > "$results/${doc}_doc.log" 2>&1 || status=1
  tail -1 "$results/${doc}_doc.log"
done
echo "== Lua tests with CUDA branches"
export LUA_PATH="$PWD/tests/lua/?.lua;$PWD/scripts/?/init.lua;$PWD/scripts/?.lua;;"
for t in $(grep -l "cuda.is_available" tests/lua/test_*.lua); do
  name=$(basename "$t" .lua)
  "$here/bin/dlua" "$t" > "$results/$name.log" 2>&1 || { status=1; echo "$name FAILED"; }
  tail -1 "$results/$name.log"
done
for check in gpu_smoke gpu_nccl; do
  echo "== tools/$check.lua"
  "$here/bin/dlua" tools/$check.lua > "$results/$check.log" 2>&1 || status=1
  tail -4 "$results/$check.log"
done
exit $status
EOF
chmod +x "$out/run.sh"
du -sh "$out"
