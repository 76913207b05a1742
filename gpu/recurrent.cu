// CUDA kernels of an LSTM step's pointwise half (contracts in tensor/kernels.def, "neural
// networks"; the CPU versions are tensor/cpu/recurrent.cpp, the math fn::LstmGates and
// fn::LstmGatesBackward). Every tensor is contiguous, non-empty and floating: gates
// (R, 4H), the others (R, H); a thread per hidden unit of a row.
#include "gpu/loops.cuh"
#include "tensor/rnn_functors.h"

namespace dl::gpu {

namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads)
lstm_gates_kernel(const T* a, const T* c, T* h, T* c2, int64_t n, int64_t H) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    const int64_t r = t / H, j = t % H;
    const T* ar = a + r * 4 * H;
    const fn::LstmState<T> s = fn::LstmGates{}(ar[j], ar[H + j], ar[2 * H + j], ar[3 * H + j], c[t]);
    h[t] = s.h;
    c2[t] = s.c;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
lstm_gates_backward_kernel(const T* a, const T* c, const T* gh, const T* gc, T* da, T* dc, int64_t n, int64_t H) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    const int64_t r = t / H, j = t % H;
    const T* ar = a + r * 4 * H;
    T* dr = da + r * 4 * H;
    const fn::LstmGrads<T> d = fn::LstmGatesBackward{}(ar[j], ar[H + j], ar[2 * H + j], ar[3 * H + j], c[t], gh[t], gc[t]);
    dr[j] = d.ai;
    dr[H + j] = d.af;
    dr[2 * H + j] = d.ag;
    dr[3 * H + j] = d.ao;
    dc[t] = d.c;
  }
}

}  // namespace

void lstm_gates(const Tensor& h, const Tensor& c2, const Tensor& gates, const Tensor& c) {
  const char* op = "lstm_gates";
  const DeviceContext& ctx = activate(c, op);
  const int64_t n = c.numel(), H = c.size(1);
  DL_DISPATCH_FLOAT(c.dtype(), op, {
    lstm_gates_kernel<scalar_t><<<grid_for(n, ctx), kThreads, 0, ctx.stream>>>(
        gates.data<scalar_t>(), c.data<scalar_t>(), h.data<scalar_t>(), c2.data<scalar_t>(), n, H);
  });
  check_launch(op);
}

void lstm_gates_backward(const Tensor& dgates, const Tensor& dc, const Tensor& gates, const Tensor& c,
                         const Tensor& gh, const Tensor& gc) {
  const char* op = "lstm_gates";
  const DeviceContext& ctx = activate(c, op);
  const int64_t n = c.numel(), H = c.size(1);
  DL_DISPATCH_FLOAT(c.dtype(), op, {
    lstm_gates_backward_kernel<scalar_t><<<grid_for(n, ctx), kThreads, 0, ctx.stream>>>(
        gates.data<scalar_t>(), c.data<scalar_t>(), gh.data<scalar_t>(), gc.data<scalar_t>(),
        dgates.data<scalar_t>(), dc.data<scalar_t>(), n, H);
  });
  check_launch(op);
}

}  // namespace dl::gpu
