// One kernel per pointwise op of the table that is not kLong, four float32 elements a
// thread as in the fused interpreter, for tests/gpu/check_registers.py: compiled with
// ptxas's report, each must need at most 32 registers (Note [Long ops in fused programs]
// in tensor/fused.h). Never linked into anything.
#include "gpu/loops.cuh"
#include "tensor/fused.h"

namespace dl {

#define DL_UNARY(Name, lua, Fn, flags)                                                    \
  __global__ void __launch_bounds__(256) one_op_##Name(const float* a, float* r, int64_t n) { \
    if constexpr (op_accepts<float>(flags) && !((flags) & kLong)) {                      \
      const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;                         \
      float x[4];                                                                        \
      for (int j = 0; j < 4; ++j) x[j] = a[i + j * n];                                   \
      for (int j = 0; j < 4; ++j) r[i + j * n] = float(fn::Fn{}(x[j]));                  \
    }                                                                                    \
  }
#define DL_BINARY(Name, lua, Fn, flags)                                                   \
  __global__ void __launch_bounds__(256) one_op_##Name(const float* a, float* r, int64_t n) { \
    if constexpr (op_accepts<float>(flags) && !((flags) & kLong)) {                      \
      const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;                         \
      float x[4], y[4];                                                                  \
      for (int j = 0; j < 4; ++j) x[j] = a[i + j * n], y[j] = a[i + (j + 4) * n];        \
      for (int j = 0; j < 4; ++j) r[i + j * n] = float(fn::Fn{}(x[j], y[j]));            \
    }                                                                                    \
  }
#include "tensor/ops.def"

}  // namespace dl
