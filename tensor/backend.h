// Per-device kernel tables: a Backend holds one entry per row of tensor/kernels.def
// (the kernels and their contracts). tensor/cpu fills the CPU's, the CUDA plugin (gpu/)
// registers its own when loaded.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "tensor/nn.h"
#include "tensor/ops.h"
#include "tensor/error.h"
#include "tensor/optim_functors.h"
#include "tensor/random.h"

namespace dl {

namespace fused { struct Program; }

struct Backend {
  const char* name;
  // memory
  void* (*alloc)(size_t nbytes, int device_index, const char* op);
  void (*free)(void* p, size_t nbytes, int device_index);
  // One entry per row of the kernel table, in its order (contracts there).
#define DL_KERNEL(name, params) void(*name) params;
#include "tensor/kernels.def"
  // matmul also takes float16 and bfloat16 (out, a and b of one of them), accumulating
  // in float32; without it the front end computes half products in float32.
  bool half_matmul = false;
};

const Backend& cpu_backend();

// Throws the error of a factorization whose LAPACK (or cuSOLVER) `info` was not 0 (< 0:
// a NaN or infinity in the matrix, which LAPACK's drivers refuse as a bad argument),
// for matrix `b` (0-based) of a batch of `count`: one wording for every backend
// (tensor/decomp.cpp).
[[noreturn]] void linalg_failed(Op op, int64_t info, int64_t b, int64_t count);

// The CPU threads of this thread's ops: OpenMP's loops and the largest matrix products
// (OpenBLAS, Note [BLAS threads] in tensor/cpu/matmul.cpp). At start, what OpenMP and
// OpenBLAS chose (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, or the cores); n >= 1.
void set_cpu_threads(int n);
int cpu_threads();

// OpenBLAS's kernels (Note [Choosing OpenBLAS's core] in tensor/cpu/openblas.cpp); asking
// loads OpenBLAS.
struct BlasInfo {
  std::string core;       // the core running now ("Haswell", "SkylakeX", ...)
  std::string detected;   // the one OpenBLAS picked by itself
  std::string chosen_by;  // "openblas", "dlua", "OPENBLAS_CORETYPE", or "host" (warned)
  std::string config;     // openblas_get_config()
  int threads = 1;        // OpenBLAS's threads for the largest products
};
BlasInfo blas_info();
// The best instruction set the CPU and the OS support: 5 AVX-512 (F, BW, DQ, VL),
// 4 AVX2 with FMA, 3 AVX, 0 older.
int cpu_simd_level();
// The OpenBLAS core to use instead of `detected` on a CPU of `cpu_level`: one for the
// CPU's level when `detected` is a pre-AVX fallback, else nullptr.
const char* better_blas_core(std::string_view detected, int cpu_level);
// Makes OpenBLAS pick its kernels again as if OPENBLAS_CORETYPE were `core` (the
// environment is restored); false when this OpenBLAS cannot, or ended on another level.
// Only while no product runs: the engine does it as it loads OpenBLAS.
bool select_blas_core(const char* core);
// The choice the engine makes as it loads OpenBLAS, made again (for tests).
void select_blas_core_at_load();
// The backend for `d`. For a cuda device this loads the plugin on first use
// (tensor/plugin.h); throws "op: cuda is not available (why)" when there is none, and
// names the device when its index is out of range.
const Backend& backend_for(Device d, const char* op);

// The backend entry `k` for `d`; a backend that leaves it null gets "op: not
// implemented for cuda" instead of a call through a null pointer.
template <typename Fn>
Fn kernel(Device d, Fn Backend::*k, const char* op) {
  const Backend& b = backend_for(d, op);
  Fn f = b.*k;
  if (!f) fail(ErrorKind::NotImplemented, op, ": not implemented for ", b.name);
  return f;
}
// Installs (or, with nullptr, removes) the backend of a device type. `device_count`, when
// not negative, bounds the device indices backend_for accepts (the plugin passes it;
// tests that install a fake backend leave it open).
void register_backend(DeviceType type, const Backend* b, int device_count = -1);

}  // namespace dl
