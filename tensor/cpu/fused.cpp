// The host's runner of fused programs (tensor/fused.h): element by element, the code a
// device kernel interprets. dl.compile runs its host groups a block at a time instead
// (Note [Fused groups] in compile/plan.cpp); this entry checks lowerings in the tests.
#include "tensor/fused.h"

#include "tensor/cpu/kernels.h"
#include "tensor/error.h"

namespace dl::cpu {

void fused(const fused::Program& p, int) {
  DL_CHECK(p.dtype == DType::Float32 || p.dtype == DType::Float64,
           "fused: a program computes in float32 or float64, not ", dtype_name(p.dtype));
  const int64_t n = p.numel;
  if (p.dtype == DType::Float32) {
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) fused::run_element<float>(p, i);
  } else {
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) fused::run_element<double>(p, i);
  }
}

}  // namespace dl::cpu
