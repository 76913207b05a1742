// The CUDA runner of fused programs (tensor/fused.h): one grid-stride kernel that
// interprets a program, four elements a thread at a time, through the functors the
// one-op kernels use (gpu/unary.cu, gpu/binary.cu), so a fused group's values are the
// device's eager ones; built twice, with and without the long ops (Note [Long ops in
// fused programs] in tensor/fused.h). Every thread of a warp runs the same instruction, so the
// interpreter's switch does not diverge; the values live in per-thread local memory,
// cached in L1.
#include "gpu/loops.cuh"
#include "tensor/fused.h"

namespace dl::gpu {

namespace {

// Thread t of n takes elements t, t + n, ..., kPerThread of them, then moves on by
// kPerThread * n, so that each load of a warp is coalesced.
constexpr int kPerThread = 4;

template <typename T, fused::Ops S>
__global__ void __launch_bounds__(kThreads) fused_kernel(const fused::Program p) {
  const int64_t n = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += n * kPerThread)
    fused::run_elements<T, kPerThread, S>(p, i, n);
}

template <typename T>
void launch(const fused::Program& p, unsigned grid, cudaStream_t stream) {
  if (fused::has_long_ops(p)) fused_kernel<T, fused::Ops::All><<<grid, kThreads, 0, stream>>>(p);
  else fused_kernel<T, fused::Ops::Short><<<grid, kThreads, 0, stream>>>(p);
}

}  // namespace

void fused(const fused::Program& p, int device_index) {
  if (p.numel == 0) return;
  const DeviceContext& c = activate(device_index, "compile");
  const unsigned grid = grid_for(p.numel / kPerThread + 1, c, kThreads);
  if (p.dtype == DType::Float32)
    launch<float>(p, grid, c.stream);
  else if (p.dtype == DType::Float64)
    launch<double>(p, grid, c.stream);
  else
    fail(ErrorKind::Type, "fused: a program computes in float32 or float64, not ", dtype_name(p.dtype));
  check_launch("compile");
}

}  // namespace dl::gpu
