// CUDA kernel of the random tensors: element i is the spec's spec(i) (tensor/random.h),
// the very function the CPU kernel runs, so a seed gives the same tensor on both.
#include "gpu/loops.cuh"

namespace dl::gpu {

namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads) random_kernel(T* out, int64_t n, fn::RandomSpec spec) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = fn::convert<T>(spec(uint64_t(i)));
}

}  // namespace

void random(const Tensor& out, const fn::RandomSpec& spec) {
  DL_ASSERT(out.is_contiguous());
  const int64_t n = out.numel();
  if (n == 0) return;
  const DeviceContext& c = activate(out, "random");
  DL_DISPATCH_ALL(out.dtype(), "random", {
    random_kernel<scalar_t><<<grid_for(n, c), kThreads, 0, c.stream>>>(out.data<scalar_t>(), n, spec);
  });
  check_launch("random");
}

}  // namespace dl::gpu
