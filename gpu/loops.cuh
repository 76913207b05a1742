// Grid-stride loops over strided, broadcast operands: the CUDA side of the functors of
// tensor/functors.h (the CPU side is tensor/cpu/loops.h, with the same geometry).
//
// Operand 0 is the output; every operand has a byte stride per dim of the output's
// shape (0 where it broadcasts). Dims of size 1 are dropped and neighbours that every
// operand walks as one are merged, so a contiguous op is one flat dim and its offsets
// are a multiply; otherwise an element's offsets come from dividing its index by the
// sizes (in 32 bits when the tensor is small enough, much cheaper than 64).
#pragma once
#include <array>
#include <climits>

#include "gpu/common.h"
#include "tensor/geometry.h"
#include "tensor/functors.h"

namespace dl::gpu {

constexpr int kThreads = 256;

template <int N>
struct Geom {
  char* data[N];
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];  // bytes
  int ndim;                      // at least 1
  int64_t numel;
  bool small;                    // numel fits 32-bit index arithmetic
};

template <int N>
Geom<N> make_geom(const std::array<const Tensor*, N>& ts) {
  Geom<N> g{};
  geometry::coalesce<N>(ts, g);   // the CPU's geometry (tensor/geometry.h)
  g.small = g.numel <= int64_t(UINT_MAX);
  if (g.numel != 0 && g.ndim == 0) {   // one element: one dim of size 1
    g.sizes[0] = 1;
    for (int k = 0; k < N; ++k) g.strides[k][0] = 0;
  }
  if (g.ndim == 0) g.ndim = 1;
  return g;
}

template <int N>
__device__ __forceinline__ void offsets(const Geom<N>& g, int64_t i, char* (&p)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) p[k] = g.data[k];
  if (g.ndim == 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] += i * g.strides[k][0];
    return;
  }
  if (g.small) {
    uint32_t r = uint32_t(i);
    for (int d = g.ndim - 1; d >= 0; --d) {
      const uint32_t s = uint32_t(g.sizes[d]);
      const uint32_t q = r % s;
      r /= s;
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] += int64_t(q) * g.strides[k][d];
    }
    return;
  }
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t q = i % g.sizes[d];
    i /= g.sizes[d];
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] += q * g.strides[k][d];
  }
}

// op(p, i) for every element i, with p[k] pointing at operand k's element.
template <int N, typename Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Geom<N> g, Op op) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += step) {
    char* p[N];
    offsets<N>(g, i, p);
    op(p, i);
  }
}

template <int N, typename Op>
void launch_elementwise(const DeviceContext& c, const Geom<N>& g, const Op& op, const char* name) {
  if (g.numel == 0) return;
  elementwise_kernel<N, Op><<<grid_for(g.numel, c, kThreads), kThreads, 0, c.stream>>>(g, op);
  check_launch(name);
}

template <typename T>
__device__ __forceinline__ T load(const char* p) { return *reinterpret_cast<const T*>(p); }
template <typename T>
__device__ __forceinline__ void store(char* p, T v) { *reinterpret_cast<T*>(p) = v; }

// ---- maps of one dtype: 16-byte loads where the operands allow -----------------------
//
// f(x) or f(x, y) -> T over operands that all have dtype T (the output first). When every
// operand is dense and 16-byte aligned, a thread reads and writes 16 bytes of each at a
// time (4 floats, 2 doubles): with 4-byte loads a streaming op kept too few bytes in
// flight and ran well below the device's bandwidth (bench/gpu.lua's 16M-float chain;
// docs/performance.md, "On a GPU"). Anything else takes the general loop above.

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kWidth = 16 / int(sizeof(T));
  T v[kWidth];
};

template <typename T, int N>
bool dense_aligned(const Geom<N>& g) {
  if (g.ndim != 1) return false;
  for (int k = 0; k < N; ++k)
    if (g.strides[k][0] != int64_t(sizeof(T)) || reinterpret_cast<uintptr_t>(g.data[k]) % 16 != 0) return false;
  return true;
}

template <typename T, int N, typename F>
__device__ __forceinline__ T map_value(const F& f, const T (&x)[N > 1 ? N - 1 : 1]) {
  static_assert(N == 2 || N == 3, "a map takes one or two operands");
  if constexpr (N == 2) return f(x[0]);
  else return f(x[0], x[1]);
}

template <typename T, int N, typename F>
__global__ void __launch_bounds__(kThreads) map_vector_kernel(Geom<N> g, F f) {
  using V = Vec16<T>;
  constexpr int W = V::kWidth;
  const int64_t nv = g.numel / W, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t k = t; k < nv; k += step) {
    V in[N - 1], o;
#pragma unroll
    for (int m = 0; m < N - 1; ++m) in[m] = reinterpret_cast<const V*>(g.data[m + 1])[k];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      T x[N - 1];
#pragma unroll
      for (int m = 0; m < N - 1; ++m) x[m] = in[m].v[j];
      o.v[j] = map_value<T, N>(f, x);
    }
    reinterpret_cast<V*>(g.data[0])[k] = o;
  }
  for (int64_t i = nv * W + t; i < g.numel; i += step) {   // the last numel % W elements
    T x[N - 1];
#pragma unroll
    for (int m = 0; m < N - 1; ++m) x[m] = reinterpret_cast<const T*>(g.data[m + 1])[i];
    reinterpret_cast<T*>(g.data[0])[i] = map_value<T, N>(f, x);
  }
}

template <typename T, int N, typename F>
struct MapOp {
  F f;
  __device__ void operator()(char* const (&p)[N], int64_t) const {
    T x[N - 1];
#pragma unroll
    for (int m = 0; m < N - 1; ++m) x[m] = load<T>(p[m + 1]);
    store<T>(p[0], map_value<T, N>(f, x));
  }
};

template <typename T, int N, typename F>
void launch_map(const DeviceContext& c, const Geom<N>& g, const F& f, const char* name) {
  if (g.numel == 0) return;
  if (!dense_aligned<T, N>(g)) return launch_elementwise<N>(c, g, MapOp<T, N, F>{f}, name);
  const int64_t work = g.numel / Vec16<T>::kWidth + 1;
  map_vector_kernel<T, N, F><<<grid_for(work, c, kThreads), kThreads, 0, c.stream>>>(g, f);
  check_launch(name);
}

// The lowest element position at which a kernel met a bad index: kernels call
// record(i); the host resets the slot before the launch and reads it after (the one
// synchronisation of an index op, so that the error names the op that failed).
struct BadIndexSlot {
  unsigned long long* slot;
  __device__ __forceinline__ void record(int64_t pos) const {
    atomicMin(slot, static_cast<unsigned long long>(pos));
  }
};

class BadIndexCheck {
 public:
  BadIndexCheck(const DeviceContext& c, const char* op)
      : c_(c), op_(op), mem_(sizeof(unsigned long long), c.index, op) {
    check_cuda(cudaMemsetAsync(mem_.as<void>(), 0xff, sizeof(unsigned long long), c.stream), op,
               "preparing the index check");
  }
  BadIndexSlot slot() const { return BadIndexSlot{mem_.as<unsigned long long>()}; }
  // The position recorded, or -1 when every index was good (waits for the kernels).
  int64_t first_bad() const {
    unsigned long long v = 0;
    d2h(&v, mem_.as<void>(), sizeof v, c_.index, op_);
    return v == ~0ull ? -1 : int64_t(v);
  }

 private:
  const DeviceContext& c_;
  const char* op_;
  Scratch mem_;
};

// The value of an int32/int64 index tensor at row-major position `pos` (host copy).
int64_t index_value_at(const Tensor& index, int64_t pos, const char* op);

}  // namespace dl::gpu
