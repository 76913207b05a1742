// CUDA kernels of the random tensors and of dropout: element i is the spec's spec(i)
// (tensor/random.h), the very function the CPU kernels run, so a seed gives the same
// tensor on both.
#include "gpu/loops.cuh"

namespace dl::gpu {

namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads) random_kernel(T* out, int64_t n, fn::RandomSpec spec) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = fn::convert<T>(spec(uint64_t(i)));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_kernel(T* out, T* mask, const T* x, int64_t n,
                                                           fn::RandomSpec spec, T kept) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const T k = spec(uint64_t(i)) != 0 ? kept : T(0);
    mask[i] = k;
    out[i] = x[i] * k;
  }
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

void dropout(const Tensor& out, const Tensor& mask, const Tensor& x, const fn::RandomSpec& spec, double scale) {
  DL_ASSERT(out.is_contiguous() && mask.is_contiguous() && x.is_contiguous());
  const int64_t n = out.numel();
  if (n == 0) return;
  const DeviceContext& c = activate(out, "dropout");
  DL_DISPATCH_FLOAT(out.dtype(), "dropout", {
    dropout_kernel<scalar_t><<<grid_for(n, c), kThreads, 0, c.stream>>>(
        out.data<scalar_t>(), mask.data<scalar_t>(), x.data<scalar_t>(), n, spec, scalar_t(scale));
  });
  check_launch("dropout");
}

}  // namespace dl::gpu
