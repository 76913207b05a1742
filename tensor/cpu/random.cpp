// CPU kernel of the random tensors: element i of the spec's stream (tensor/random.h),
// in parallel chunks; the values do not depend on the thread count.
#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace dl::cpu {

void random(const Tensor& out, const fn::RandomSpec& spec) {
  DL_ASSERT(out.is_contiguous());
  DL_DISPATCH_ALL(out.dtype(), "random", {
    scalar_t* p = out.data<scalar_t>();
    parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = fn::convert<scalar_t>(spec(uint64_t(i)));
    });
  });
}

}  // namespace dl::cpu
