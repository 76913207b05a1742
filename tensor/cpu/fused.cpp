// The host's runner of fused programs (tensor/fused.h): the code a device kernel
// interprets, four elements a call. dl.compile runs its host groups a block at a time instead
// (Note [Fused groups] in compile/plan.cpp); this entry checks lowerings in the tests.
#include "tensor/fused.h"

#include "tensor/cpu/kernels.h"
#include "tensor/error.h"

namespace dl::cpu {

namespace {

// Four neighbouring elements a call, as a device thread takes four (strided there).
template <typename T>
void run(const fused::Program& p) {
  const int64_t n = p.numel;
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 16))
  for (int64_t i = 0; i < n; i += 4) fused::run_elements<T, 4>(p, i, 1);
}

}  // namespace

void fused(const fused::Program& p, int) {
  DL_CHECK(p.dtype == DType::Float32 || p.dtype == DType::Float64,
           "fused: a program computes in float32 or float64, not ", dtype_name(p.dtype));
  if (p.dtype == DType::Float32) run<float>(p);
  else run<double>(p);
}

}  // namespace dl::cpu
