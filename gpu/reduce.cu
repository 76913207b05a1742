// CUDA kernels of the reductions, max/min with indices, and softmax: the reducers of
// tensor/reduce_functors.h (the ones tensor/cpu/reduce.cpp runs) in grid-stride kernels.
//
// The plan is the CPU's: x's dims sorted by stride (memory order), size-1 dims dropped,
// neighbours merged, then split into kept and reduced dims. Each output is folded by a
// group of bx threads (a block holds 256 / bx groups):
//  - bx > 1 when the innermost dim in memory is reduced and long: the group's threads
//    read neighbouring elements of each row (coalesced; 16 bytes a load where the row
//    is dense, fold_dense) and their folds are merged by warp shuffles, then the
//    warps' in order (group_merge);
//  - bx = 1 otherwise: a thread per output, and neighbouring threads read neighbouring
//    outputs' elements.
// When that leaves the device mostly idle (few outputs, long reductions), each output's
// elements are cut into S slices (grid.y): slice folds go to a scratch buffer and a
// second kernel merges them (a warp an output) and finishes. The fold order depends
// only on the shape (and, for dense rows and columns, on the data's offset from a
// 16-byte boundary), so results are deterministic, though not bit-identical to the
// CPU's (another order of float additions).
#include <cmath>
#include <algorithm>
#include <cstring>
#include <optional>

#include "gpu/loops.cuh"
#include "tensor/geometry.h"
#include "tensor/reduce_dispatch.h"
#include "tensor/reduce_functors.h"

namespace dl::gpu {

namespace {

// x's dims split into kept and reduced ones (tensor/geometry.h, as the CPU's).
using RedPlan = geometry::ReducePlan;
RedPlan make_plan(const Tensor& out, const Tensor& x, const bool* red) { return geometry::reduce_plan(out, x, red); }

__device__ __forceinline__ void kept_offsets(const RedPlan& p, int64_t o, int64_t& xo, int64_t& oo) {
  if (p.nk == 1) {   // no division (64-bit ones are long sequences of instructions)
    xo += o * p.kxs[0];
    oo += o * p.kos[0];
    return;
  }
  for (int d = p.nk - 1; d >= 0; --d) {
    const int64_t q = o % p.ks[d];
    o /= p.ks[d];
    xo += q * p.kxs[d];
    oo += q * p.kos[d];
  }
}

// The x offset of row `row` of the reduced dims other than the innermost.
__device__ __forceinline__ int64_t outer_offset(const RedPlan& p, int64_t row) {
  int64_t off = 0;
  for (int d = p.nr - 2; d >= 0; --d) {
    const int64_t q = row % p.rs[d];
    row /= p.rs[d];
    off += q * p.rxs[d];
  }
  return off;
}

// This block's slice (blockIdx.y of gridDim.y) of n reduced elements, [lo, hi): in 128
// bits, since an expanded x may reduce over nearly 2^63 elements, and not at all for one
// slice (a 128-bit division is a long routine, most of a short block's life).
__device__ __forceinline__ void slice_of(int64_t n, int64_t& lo, int64_t& hi) {
  const int64_t S = gridDim.y, k = blockIdx.y;
  lo = S == 1 ? 0 : int64_t(__int128(n) * k / S);
  hi = S == 1 ? n : int64_t(__int128(n) * (k + 1) / S);
}

// ---- merging inside a warp and a block -------------------------------------------------

// Lane l + d's `v` (a value of 1 to 8 bytes: every reducer's accumulator).
template <typename A>
__device__ __forceinline__ A shfl_down(A v, int d) {
  static_assert(sizeof(A) <= 8, "an accumulator of at most 8 bytes");
  using W = std::conditional_t<(sizeof(A) <= 4), unsigned, unsigned long long>;
  W w = 0;
  memcpy(&w, &v, sizeof(A));
  w = __shfl_down_sync(0xffffffffu, w, d);
  memcpy(&v, &w, sizeof(A));
  return v;
}

// The merge of the warp's 32 `v`s, in lane 0 (lane l with l + 16, then l + 8, ...: a
// fixed tree). The other lanes' results are partial.
template <typename A, typename R>
__device__ __forceinline__ A warp_merge(A v, const R& r) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = r.merge(v, shfl_down(v, d));
  return v;
}

// The merge of the `v`s of a group of `width` threads (a multiple of 32; the group's
// warps are warps of the block, threadIdx.x its position), in the group's thread 0:
// each warp merges its own, then the first thread merges the warps' in order. `sh` holds
// one value per warp of the block; every thread of the block must call it.
template <typename A, typename R>
__device__ __forceinline__ A group_merge(A* sh, A v, const R& r, int width) {
  const int tx = int(threadIdx.x), warps = width / 32, first = int(threadIdx.y) * warps;
  v = warp_merge(v, r);
  if (warps == 1) return v;
  if (tx % 32 == 0) sh[first + tx / 32] = v;
  __syncthreads();
  if (tx == 0)
    for (int k = 1; k < warps; ++k) v = r.merge(v, sh[first + k]);
  __syncthreads();
  return v;
}

// The first 16-byte boundary in p's n elements (p + n if there is none), with `head`
// the number of elements before it.
template <typename T>
__device__ __forceinline__ const T* aligned_from(const T* p, int64_t n, int64_t& head) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(p) % 16;
  head = mis == 0 ? 0 : int64_t((16 - mis) / sizeof(T));
  if (head > n) head = n;
  return p + head;
}

// acc ... a3 folded with the elements [0, n) of a dense row p, by the group's threads
// (tx of bx): the ones before p's first 16-byte boundary one each, then 16 bytes a load
// (four loads in flight), then the rest one each. The split depends on p's alignment,
// so a view's fold order is fixed by its shape and offset.
template <typename R>
__device__ __forceinline__ void fold_dense(const R& r, const typename R::in_t* p, int64_t n, int tx, int bx,
                                           double c, typename R::acc_t& acc, typename R::acc_t& a1,
                                           typename R::acc_t& a2, typename R::acc_t& a3) {
  using T = typename R::in_t;
  using V = Vec16<T>;
  constexpr int W = V::kWidth;
  int64_t head;
  const V* v = reinterpret_cast<const V*>(aligned_from(p, n, head));
  if (tx < head) acc = r.step(acc, p[tx], c);
  const int64_t nv = (n - head) / W;
  int64_t k = tx;
  for (; k + 3 * bx < nv; k += 4 * bx) {
    const V v0 = v[k], v1 = v[k + bx], v2 = v[k + 2 * bx], v3 = v[k + 3 * bx];
#pragma unroll
    for (int j = 0; j < W; ++j) {
      acc = r.step(acc, v0.v[j], c);
      a1 = r.step(a1, v1.v[j], c);
      a2 = r.step(a2, v2.v[j], c);
      a3 = r.step(a3, v3.v[j], c);
    }
  }
  for (; k < nv; k += bx) {
    const V v0 = v[k];
#pragma unroll
    for (int j = 0; j < W; ++j) acc = r.step(acc, v0.v[j], c);
  }
  for (int64_t i = head + nv * W + tx; i < n; i += bx) acc = r.step(acc, p[i], c);
}

template <typename R, typename Out>
__global__ void __launch_bounds__(kThreads)
reduce_kernel(RedPlan p, R r, const typename R::in_t* x, Out* out, typename R::acc_t* partial,
              const double* centers) {
  using A = typename R::acc_t;
  using T = typename R::in_t;
  __shared__ A sh[kThreads / 32];
  const int bx = int(blockDim.x), by = int(blockDim.y), tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t S = gridDim.y, slice = blockIdx.y;
  const bool dense = bx > 1 && p.rxs[p.nr - 1] == 1;   // the group reads along dense rows
  int64_t r0, r1;   // this slice's share of the reduced rows
  slice_of(p.nred, r0, r1);
  const int64_t L = p.rs[p.nr - 1], ls = p.rxs[p.nr - 1];
  for (int64_t ob = int64_t(blockIdx.x) * by; ob < p.nout; ob += int64_t(gridDim.x) * by) {
    const int64_t o = ob + ty;
    A acc = r.identity();
    int64_t oo = 0;
    double c = 0;
    if (o < p.nout) {
      int64_t xo = 0;
      kept_offsets(p, o, xo, oo);
      if constexpr (R::kCentered) c = R::center(centers[oo]);
      // four folds side by side, so that a thread has four loads in flight (one fold
      // a thread leaves the device's memory mostly idle); merged in a fixed order below.
      // The walk over runs is written out here and in reduce_columns_dense: as a shared
      // helper taking a lambda it made the row sums slower (performance.md, "On a GPU").
      A a1 = r.identity(), a2 = r.identity(), a3 = r.identity();
      for (int64_t q = r0; q < r1;) {
        const int64_t row = p.nr == 1 ? 0 : q / L, i0 = q - row * L;
        const int64_t i1 = L - i0 < r1 - q ? L : i0 + (r1 - q);
        const T* base = x + xo + outer_offset(p, row);
        if (dense) {
          fold_dense(r, base + i0, i1 - i0, tx, bx, c, acc, a1, a2, a3);
          q += i1 - i0;
          continue;
        }
        int64_t i = i0 + tx;
        for (; i + 3 * bx < i1; i += 4 * bx) {
          acc = r.step(acc, base[i * ls], c);
          a1 = r.step(a1, base[(i + bx) * ls], c);
          a2 = r.step(a2, base[(i + 2 * bx) * ls], c);
          a3 = r.step(a3, base[(i + 3 * bx) * ls], c);
        }
        for (; i < i1; i += bx) acc = r.step(acc, base[i * ls], c);
        q += i1 - i0;
      }
      acc = r.merge(r.merge(acc, a1), r.merge(a2, a3));
    }
    if (bx > 1) acc = group_merge(sh, acc, r, bx);
    if (tx == 0 && o < p.nout) {
      if (S == 1) out[oo] = fn::convert<Out>(r.finish(acc, p.nred, c));
      else partial[o * S + slice] = acc;
    }
  }
}

// bx = 1 with the kept innermost dim dense in x and in the output: a thread folds W
// neighbouring outputs (16 bytes of x, W = 16 / sizeof(T) elements), one 16-byte load a
// reduced element, four loads in flight; each output has one accumulator, fed its
// elements in order (reduce_kernel's thread keeps four side by side instead: the order
// depends on the kernel, and the kernel on the shape, strides and alignment, so a
// result is still the same on every run). The host checks that every offset a thread
// starts from is a multiple of W and x 16-byte aligned (dense_columns).
template <typename R, typename Out>
__global__ void __launch_bounds__(kThreads)
reduce_columns_dense(RedPlan p, R r, const typename R::in_t* x, Out* out, typename R::acc_t* partial,
                     const double* centers) {
  using A = typename R::acc_t;
  using T = typename R::in_t;
  using V = Vec16<T>;
  constexpr int W = V::kWidth;
  const int64_t S = gridDim.y, slice = blockIdx.y;
  int64_t r0, r1;
  slice_of(p.nred, r0, r1);
  const int64_t L = p.rs[p.nr - 1], ls = p.rxs[p.nr - 1];
  const int64_t groups = p.nout / W, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    int64_t xo = 0, oo = 0;
    kept_offsets(p, g * W, xo, oo);
    double c[W] = {};
    if constexpr (R::kCentered)
#pragma unroll
      for (int j = 0; j < W; ++j) c[j] = R::center(centers[oo + j]);
    A acc[W];
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] = r.identity();
    for (int64_t q = r0; q < r1;) {
      const int64_t row = p.nr == 1 ? 0 : q / L, i0 = q - row * L;
      const int64_t i1 = L - i0 < r1 - q ? L : i0 + (r1 - q);
      const T* base = x + xo + outer_offset(p, row);
      int64_t i = i0;
      for (; i + 3 < i1; i += 4) {
        V v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = *reinterpret_cast<const V*>(base + (i + u) * ls);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int j = 0; j < W; ++j) acc[j] = r.step(acc[j], v[u].v[j], c[j]);
      }
      for (; i < i1; ++i) {
        const V v0 = *reinterpret_cast<const V*>(base + i * ls);
#pragma unroll
        for (int j = 0; j < W; ++j) acc[j] = r.step(acc[j], v0.v[j], c[j]);
      }
      q += i1 - i0;
    }
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (S == 1) out[oo + j] = fn::convert<Out>(r.finish(acc[j], p.nred, c[j]));
      else partial[(g * W + j) * S + slice] = acc[j];
    }
  }
}

// Whether reduce_columns_dense can fold x's plan: elements of 4 bytes or more (more
// outputs a thread would cost too many registers), the kept innermost dim dense in x and
// the output and a multiple of W long, every other stride a multiple of W.
template <typename T>
bool dense_columns(const RedPlan& p, const T* x) {
  constexpr int64_t W = Vec16<T>::kWidth;
  if (sizeof(T) < 4 || p.red_innermost || p.nk == 0 || p.nred == 0) return false;
  if (p.kxs[p.nk - 1] != 1 || p.kos[p.nk - 1] != 1 || p.ks[p.nk - 1] % W != 0) return false;
  for (int d = 0; d + 1 < p.nk; ++d)
    if (p.kxs[d] % W != 0) return false;
  for (int d = 0; d < p.nr; ++d)
    if (p.rxs[d] % W != 0) return false;
  return reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

// The slice folds of an output merged by one warp (blockDim (32, kThreads / 32)): lane l
// merges slices l, l + 32, ... in order, then the lanes' folds merge pairwise
// (warp_merge). One thread merging all S in turn waited S times on the latency of L2 (up
// to 1,024 slices: most of a full sum's time).
template <typename R, typename Out>
__global__ void __launch_bounds__(kThreads)
reduce_finish_kernel(RedPlan p, R r, const typename R::acc_t* partial, int64_t S, Out* out,
                     const double* centers) {
  using A = typename R::acc_t;
  const int lane = int(threadIdx.x), w = int(threadIdx.y);
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.y + w; o < p.nout; o += step) {
    A acc = r.identity();
    for (int64_t s = lane; s < S; s += 32) acc = r.merge(acc, partial[o * S + s]);
    acc = warp_merge(acc, r);
    if (lane == 0) {
      int64_t xo = 0, oo = 0;
      kept_offsets(p, o, xo, oo);
      double c = 0;
      if constexpr (R::kCentered) c = R::center(centers[oo]);
      out[oo] = fn::convert<Out>(r.finish(acc, p.nred, c));
    }
  }
}

// Threads per output and slices per output for `nout` outputs of `nred` elements.
struct Shape2 {
  int bx = 1;
  int64_t S = 1;
};
Shape2 split(const DeviceContext& c, int64_t nout, int64_t nred, bool coalesced_rows, int64_t row_len) {
  Shape2 s;
  if (coalesced_rows && row_len >= 32) {
    s.bx = 32;
    while (s.bx < row_len && s.bx < kThreads) s.bx *= 2;
  }
  const int64_t target = int64_t(c.sm_count) * 2048;  // threads that fill the device
  const int64_t have = nout * s.bx;
  if (have < target && nred >= int64_t(s.bx) * 64) {
    int64_t S = (target + have - 1) / have;
    const int64_t by_work = nred / (int64_t(s.bx) * 32);  // each thread folds 32 or more
    if (S > by_work) S = by_work;
    if (S > 1024) S = 1024;
    s.S = S < 1 ? 1 : S;
  }
  return s;
}

template <typename Out, typename R>
void run_reduce(const R& r, const Tensor& out, const Tensor& x, const std::vector<int>& dims,
                const double* centers, const char* op) {
  using A = typename R::acc_t;
  using T = typename R::in_t;
  DL_ASSERT(out.is_contiguous() && out.dtype() == dtype_of<Out>::value);
  if (out.numel() == 0) return;
  const DeviceContext& c = activate(out, op);
  RedPlan p;
  if (x.numel() == 0) {  // an empty reduction: each output is the identity, finished
    p.nk = 1;
    p.ks[0] = out.numel();
    p.kos[0] = 1;
    p.nr = 1;
    p.rs[0] = 1;
    p.nout = out.numel();
    p.nred = 0;
  } else {
    bool red[kMaxDims] = {};
    for (int d : dims) red[d] = true;
    p = make_plan(out, x, red);
  }
  const T* xp = x.numel() == 0 ? nullptr : x.data<T>();
  Out* o = out.data<Out>();
  // at most 16 blocks a multiprocessor (about two rounds of resident blocks), each then
  // folding several outputs in turn; 8 to 16 ran the row sums of bench/gpu.lua fastest
  const int64_t cap = int64_t(c.sm_count) * 16;
  const bool columns = dense_columns(p, xp);
  Shape2 s;
  dim3 grid, block;
  if (columns) {
    const int64_t threads = p.nout / Vec16<T>::kWidth;
    s = split(c, threads, p.nred, false, 0);
    grid = dim3(unsigned(std::min((threads + kThreads - 1) / kThreads, cap)), unsigned(s.S));
    block = dim3(kThreads);
  } else {
    s = split(c, p.nout, p.nred, p.red_innermost, p.rs[p.nr - 1]);
    const int by = kThreads / s.bx;
    grid = dim3(unsigned(std::min((p.nout + by - 1) / by, cap)), unsigned(s.S));
    block = dim3(unsigned(s.bx), unsigned(by));
  }
  std::optional<Scratch> part;   // the slices' folds
  if (s.S > 1) part.emplace(size_t(p.nout * s.S) * sizeof(A), c.index, op);
  A* partial = part ? part->as<A>() : nullptr;
  if (columns) reduce_columns_dense<R, Out><<<grid, block, 0, c.stream>>>(p, r, xp, o, partial, centers);
  else reduce_kernel<R, Out><<<grid, block, 0, c.stream>>>(p, r, xp, o, partial, centers);
  check_launch(op);
  if (s.S == 1) return;
  const int warps = kThreads / 32;
  const dim3 fgrid(grid_for(p.nout, c, warps)), fblock(32, unsigned(warps));
  reduce_finish_kernel<R, Out><<<fgrid, fblock, 0, c.stream>>>(p, r, partial, s.S, o, centers);
  check_launch(op);
}

// Two passes: the centres (the first reducer's results, in double), then the centred fold.
template <typename Out, typename First, typename R>
void run_centered(const First& first, const R& r, const Tensor& out, const Tensor& x,
                  const std::vector<int>& dims, const char* op) {
  Tensor cen = empty(out.shape(), DType::Float64, out.device(), op);
  run_reduce<double>(first, cen, x, dims, nullptr, op);
  run_reduce<Out>(r, out, x, dims, cen.data<double>(), op);
}

template <typename T>
void reduce_norm(const Tensor& out, const Tensor& x, const std::vector<int>& dims, double p) {
  const char* op = "norm";
  if (p == 2) run_reduce<T>(fn::Norm2Red<T>{}, out, x, dims, nullptr, op);
  else if (p == 1) run_reduce<T>(fn::Norm1Red<T>{}, out, x, dims, nullptr, op);
  else if (p == 0) run_reduce<T>(fn::Norm0Red<T>{}, out, x, dims, nullptr, op);
  else if (p == INFINITY) run_reduce<T>(fn::NormInfRed<T>{}, out, x, dims, nullptr, op);
  else if (p == -INFINITY) run_reduce<T>(fn::NormNegInfRed<T>{}, out, x, dims, nullptr, op);
  else run_reduce<T>(fn::NormPRed<T>{p}, out, x, dims, nullptr, op);
}

// ---- max/min with indices -----------------------------------------------------------

// The kept dims of x (all but `dim`) in row-major order: output o (the row-major index
// over them, as the contiguous keepdim outputs are laid out) reads x from xo on.
struct ArgPlan {
  int nk = 0;
  int64_t ks[kMaxDims] = {}, kxs[kMaxDims] = {};
  int64_t n = 0, s = 0, nout = 1;
};

// (bv, bi) becomes the better of itself and (v, i): the larger (smaller) value, a NaN
// over any number, the smaller index between equals; bi < 0 is "nothing yet".
template <typename T, bool IsMax>
__device__ __forceinline__ void arg_merge(T& bv, int64_t& bi, T v, int64_t i) {
  if (i < 0) return;
  if (bi < 0) {
    bv = v;
    bi = i;
    return;
  }
  if constexpr (fn::kIsFloat<T>) {
    const bool bn = bv != bv, vn = v != v;
    if (bn || vn) {
      if ((vn && !bn) || (vn && bn && i < bi)) {
        bv = v;
        bi = i;
      }
      return;
    }
  }
  fn::ArgBetter<T, IsMax> better;
  if (better(v, bv) || (!better(bv, v) && i < bi)) {
    bv = v;
    bi = i;
  }
}

template <typename T, bool IsMax>
__global__ void __launch_bounds__(kThreads)
arg_kernel(ArgPlan p, const T* x, T* vals, int64_t* idx, T* pv, int64_t* pi) {
  __shared__ T sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int bx = int(blockDim.x), by = int(blockDim.y), tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t S = gridDim.y, slice = blockIdx.y;
  int64_t i0, i1;
  slice_of(p.n, i0, i1);
  for (int64_t ob = int64_t(blockIdx.x) * by; ob < p.nout; ob += int64_t(gridDim.x) * by) {
    const int64_t o = ob + ty;
    T bv = T(0);
    int64_t bi = -1;
    if (o < p.nout) {
      int64_t xo = 0;
      if (p.nk == 1) {
        xo = o * p.kxs[0];   // no 64-bit division, as kept_offsets
      } else {
        int64_t rest = o;
        for (int d = p.nk - 1; d >= 0; --d) {
          xo += (rest % p.ks[d]) * p.kxs[d];
          rest /= p.ks[d];
        }
      }
      for (int64_t i = i0 + tx; i < i1; i += bx) arg_merge<T, IsMax>(bv, bi, x[xo + i * p.s], i);
    }
    if (bx > 1) {
      const int t = ty * bx + tx;
      sv[t] = bv;
      si[t] = bi;
      __syncthreads();
      for (int w = bx / 2; w > 0; w /= 2) {
        if (tx < w) arg_merge<T, IsMax>(sv[t], si[t], sv[t + w], si[t + w]);
        __syncthreads();
      }
      bv = sv[ty * bx];
      bi = si[ty * bx];
      __syncthreads();
    }
    if (tx == 0 && o < p.nout) {
      if (S == 1) {
        if (vals) vals[o] = bv;
        idx[o] = bi;
      } else {
        pv[o * S + slice] = bv;
        pi[o * S + slice] = bi;
      }
    }
  }
}

template <typename T, bool IsMax>
__global__ void __launch_bounds__(kThreads)
arg_finish_kernel(int64_t nout, int64_t S, const T* pv, const int64_t* pi, T* vals, int64_t* idx) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < nout; o += step) {
    T bv = pv[o * S];
    int64_t bi = pi[o * S];
    for (int64_t s = 1; s < S; ++s) arg_merge<T, IsMax>(bv, bi, pv[o * S + s], pi[o * S + s]);
    if (vals) vals[o] = bv;
    idx[o] = bi;
  }
}

template <typename T, bool IsMax>
void arg_reduce_typed(const Tensor& values, const Tensor& indices, const Tensor& x, int dim, const char* op) {
  const DeviceContext& c = activate(indices, op);
  ArgPlan p;
  for (int d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    p.ks[p.nk] = x.size(d);
    p.kxs[p.nk++] = x.stride(d);
    p.nout *= x.size(d);
  }
  p.n = x.size(dim);
  p.s = x.stride(dim);
  const Shape2 s = split(c, p.nout, p.n, p.s == 1, p.n);
  const int by = kThreads / s.bx;
  int64_t groups = (p.nout + by - 1) / by;
  const int64_t cap = int64_t(c.sm_count) * 64;
  if (groups > cap) groups = cap;
  const dim3 grid(unsigned(groups), unsigned(s.S)), block(unsigned(s.bx), unsigned(by));
  T* vo = values.defined() ? values.data<T>() : nullptr;
  int64_t* io = indices.data<int64_t>();
  if (s.S == 1) {
    arg_kernel<T, IsMax><<<grid, block, 0, c.stream>>>(p, x.data<T>(), vo, io, nullptr, nullptr);
    check_launch(op);
    return;
  }
  Scratch pv(size_t(p.nout * s.S) * sizeof(T), c.index, op);
  Scratch pi(size_t(p.nout * s.S) * sizeof(int64_t), c.index, op);
  arg_kernel<T, IsMax><<<grid, block, 0, c.stream>>>(p, x.data<T>(), vo, io, pv.as<T>(), pi.as<int64_t>());
  check_launch(op);
  arg_finish_kernel<T, IsMax><<<grid_for(p.nout, c), kThreads, 0, c.stream>>>(p.nout, s.S, pv.as<T>(),
                                                                              pi.as<int64_t>(), vo, io);
  check_launch(op);
}

// ---- softmax --------------------------------------------------------------------------

// The merge of every thread's `v` in the block (blockDim.y 1), returned to every
// thread: each warp merges its own, then every thread merges the warps' in order.
template <typename A, typename R>
__device__ A block_merge(A* sh, A v, const R& r) {
  const int t = int(threadIdx.x), warps = int(blockDim.x) / 32;
  v = warp_merge(v, r);
  if (t % 32 == 0) sh[t / 32] = v;
  __syncthreads();
  A out = sh[0];
  for (int k = 1; k < warps; ++k) out = r.merge(out, sh[k]);
  __syncthreads();   // sh is free for the next merge
  return out;
}

// J == 1: a block per row. The same passes as the CPU: the max (NaN wins), then for
// log_softmax the centred log-sum-exp and x - m - log(s); for softmax exp(x - m) kept
// in the output and scaled by 1 / its sum.
template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_rows(const T* x, T* out, int64_t M, int64_t N, bool log) {
  __shared__ T shm[kThreads / 32];
  __shared__ double shs[kThreads / 32];
  const fn::AmaxRed<T> amax;
  const fn::SumRed<double> dsum;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const T* row = x + m * N;
    T* o = out + m * N;
    T mx = amax.identity();
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) mx = amax.step(mx, row[i], 0.0);
    mx = block_merge(shm, mx, amax);
    if (log) {
      const fn::LogsumexpRed<T> lse;
      double s = lse.identity();
      for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s = lse.step(s, row[i], double(mx));
      s = block_merge(shs, s, dsum);
      const T ls = T(std::log(s));
      const fn::LogSoftmaxOutFn f;
      for (int64_t i = threadIdx.x; i < N; i += blockDim.x) o[i] = f(row[i], mx, ls);
    } else {
      double s = 0;
      for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const T e = std::exp(row[i] - mx);
        o[i] = e;
        s += double(e);
      }
      s = block_merge(shs, s, dsum);
      const T inv = T(1.0 / s);
      for (int64_t i = threadIdx.x; i < N; i += blockDim.x) o[i] *= inv;
    }
  }
}

// J == 1 with dense, 16-byte aligned rows of at most kThreads * K vectors: a block per
// row that reads the row once into registers, 16 bytes a load, and writes it once (the
// general kernel above reads it twice and writes the output twice). The same math.
template <typename T, int K>
__global__ void __launch_bounds__(kThreads)
softmax_rows_dense(const T* x, T* out, int64_t M, int64_t N, bool log) {
  using V = Vec16<T>;
  constexpr int W = V::kWidth;
  __shared__ T shm[kThreads / 32];
  __shared__ double shs[kThreads / 32];
  const fn::AmaxRed<T> amax;
  const fn::SumRed<double> dsum;
  const int64_t nv = N / W;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const V* row = reinterpret_cast<const V*>(x + m * N);
    V* o = reinterpret_cast<V*>(out + m * N);
    V buf[K];
    T mx = amax.identity();
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      if (i < nv) {
        buf[k] = row[i];
#pragma unroll
        for (int j = 0; j < W; ++j) mx = amax.step(mx, buf[k].v[j], 0.0);
      }
    }
    mx = block_merge(shm, mx, amax);
    double s = 0;
    if (log) {
      const fn::LogsumexpRed<T> lse;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (threadIdx.x + int64_t(k) * kThreads < nv)
#pragma unroll
          for (int j = 0; j < W; ++j) s = lse.step(s, buf[k].v[j], double(mx));
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (threadIdx.x + int64_t(k) * kThreads < nv)
#pragma unroll
          for (int j = 0; j < W; ++j) {
            buf[k].v[j] = std::exp(buf[k].v[j] - mx);
            s += double(buf[k].v[j]);
          }
    }
    s = block_merge(shs, s, dsum);
    const T f = log ? T(std::log(s)) : T(1.0 / s);
    const fn::LogSoftmaxOutFn lf;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      if (i < nv) {
#pragma unroll
        for (int j = 0; j < W; ++j) buf[k].v[j] = log ? lf(buf[k].v[j], mx, f) : buf[k].v[j] * f;
        o[i] = buf[k];
      }
    }
  }
}

// softmax's gradient along rows (Note [Softmax's gradient in one pass] in
// tensor/cpu/reduce.cpp): a block per row, the sum of the rounded products in double.
template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_backward_rows(T* gx, const T* g, const T* y, int64_t M, int64_t N) {
  __shared__ double shs[kThreads / 32];
  const fn::SumRed<double> dsum;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const T* gr = g + m * N;
    const T* yr = y + m * N;
    double s = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += double(T(gr[i] * yr[i]));
    const T st = T(block_merge(shs, s, dsum));
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) gx[m * N + i] = yr[i] * (gr[i] - st);
  }
}

// The same with dense, 16-byte aligned rows of at most kThreads * K vectors, g's and y's
// rows read once into registers, 16 bytes a load (as softmax_rows_dense).
template <typename T, int K>
__global__ void __launch_bounds__(kThreads)
softmax_backward_rows_dense(T* gx, const T* g, const T* y, int64_t M, int64_t N) {
  using V = Vec16<T>;
  constexpr int W = V::kWidth;
  __shared__ double shs[kThreads / 32];
  const fn::SumRed<double> dsum;
  const int64_t nv = N / W;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const V* gr = reinterpret_cast<const V*>(g + m * N);
    const V* yr = reinterpret_cast<const V*>(y + m * N);
    V gb[K], yb[K];
    double s = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      if (i < nv) {
        gb[k] = gr[i];
        yb[k] = yr[i];
#pragma unroll
        for (int j = 0; j < W; ++j) s += double(T(gb[k].v[j] * yb[k].v[j]));
      }
    }
    const T st = T(block_merge(shs, s, dsum));
    V* o = reinterpret_cast<V*>(gx + m * N);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * kThreads;
      if (i < nv) {
#pragma unroll
        for (int j = 0; j < W; ++j) gb[k].v[j] = yb[k].v[j] * (gb[k].v[j] - st);
        o[i] = gb[k];
      }
    }
  }
}

// J > 1: a thread per (m, j) column, neighbouring threads on neighbouring columns.
template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_cols(const T* x, T* out, int64_t M, int64_t N, int64_t J, bool log) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < M * J; t += step) {
    const int64_t m = t / J, j = t % J;
    const T* base = x + m * N * J + j;
    T* ob = out + m * N * J + j;
    T mx = base[0];
    for (int64_t i = 1; i < N; ++i) mx = fn::nan_max(mx, base[i * J]);
    double s = 0;
    for (int64_t i = 0; i < N; ++i) {
      const T e = std::exp(base[i * J] - mx);
      if (!log) ob[i * J] = e;
      s += double(e);
    }
    if (log) {
      const T f = T(std::log(s));
      const fn::LogSoftmaxOutFn g;
      for (int64_t i = 0; i < N; ++i) ob[i * J] = g(base[i * J], mx, f);
    } else {
      const T f = T(1.0 / s);
      for (int64_t i = 0; i < N; ++i) ob[i * J] *= f;
    }
  }
}

bool aligned16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) return false;
  return true;
}

template <typename T>
void softmax_typed(bool log, const Tensor& out, const Tensor& x, int dim, const char* op) {
  // An empty x's other sizes may multiply past 2^63, e.g. (2^62, 2^62, 0).
  if (x.numel() == 0) return;
  int64_t M = 1, N = x.size(dim), J = 1;
  for (int d = 0; d < dim; ++d) M *= x.size(d);
  for (int d = dim + 1; d < x.dim(); ++d) J *= x.size(d);
  const DeviceContext& c = activate(out, op);
  if (J == 1) {
    const int64_t cap = int64_t(c.sm_count) * 16;
    const unsigned grid = unsigned(M < cap ? M : cap);
    constexpr int W = Vec16<T>::kWidth, K = 4;
    if (aligned16({&x, &out}) && N % W == 0 && N <= int64_t(kThreads) * K * W)
      softmax_rows_dense<T, K><<<grid, kThreads, 0, c.stream>>>(x.data<T>(), out.data<T>(), M, N, log);
    else
      softmax_rows<T><<<grid, kThreads, 0, c.stream>>>(x.data<T>(), out.data<T>(), M, N, log);
  } else {
    softmax_cols<T><<<grid_for(M * J, c), kThreads, 0, c.stream>>>(x.data<T>(), out.data<T>(), M, N, J, log);
  }
  check_launch(op);
}

}  // namespace

namespace {
// The plugin's kernels for dispatch_reduction (tensor/reduce_dispatch.h).
struct Runner {
  const Tensor& out;
  const Tensor& x;
  const std::vector<int>& dims;
  const char* name;
  template <typename Out, typename R> void plain(R r) { run_reduce<Out>(r, out, x, dims, nullptr, name); }
  template <typename T, typename R1, typename R2> void centered(R1 first, R2 second) {
    run_centered<T>(first, second, out, x, dims, name);
  }
  template <typename T> void norm(double p) { reduce_norm<T>(out, x, dims, p); }
};
}  // namespace

void reduce(Op op, const Tensor& out, const Tensor& x, const std::vector<int>& dims, const ReduceOpts& opts) {
  Runner run{out, x, dims, op_name(op)};
  dispatch_reduction(op, x.dtype(), opts, run);
}

void arg_reduce(Op op, const Tensor& values, const Tensor& indices, const Tensor& x, int dim) {
  DL_ASSERT(indices.is_contiguous() && indices.dtype() == DType::Int64);
  DL_ASSERT(!values.defined() || (values.is_contiguous() && values.dtype() == x.dtype()));
  if (indices.numel() == 0) return;
  const bool is_max = op == Op::MaxDim || op == Op::Argmax;
  DL_ASSERT(is_max || op == Op::MinDim || op == Op::Argmin);
  const char* name = op_name(op);
  DL_DISPATCH_ALL(x.dtype(), name, {
    if (is_max) arg_reduce_typed<scalar_t, true>(values, indices, x, dim, name);
    else arg_reduce_typed<scalar_t, false>(values, indices, x, dim, name);
  });
}

// ---- scans ------------------------------------------------------------------------------
// A thread per (m, j) line of x seen as (M, N, J): neighbouring threads take neighbouring
// j, so each step of the lines reads a contiguous row; folds in A as the CPU's.
template <typename T, typename A, typename O>
__global__ void __launch_bounds__(kThreads)
scan_lines(const T* x, O* out, int64_t M, int64_t N, int64_t J, bool reverse, fn::ScanStep fold) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < M * J; t += stride) {
    const int64_t m = t / J, j = t % J;
    A acc = fold.template init<A>();
    for (int64_t s = 0; s < N; ++s) {
      const int64_t n = reverse ? N - 1 - s : s;
      const int64_t at = (m * N + n) * J + j;
      acc = fold(acc, A(x[at]));
      out[at] = O(acc);
    }
  }
}

template <typename T, typename A, typename O>
void scan_typed(const Tensor& out, const Tensor& x, int dim, bool reverse, fn::ScanStep step) {
  const DeviceContext& c = activate(x, "cumsum");
  int64_t M = 1, N = x.size(dim), J = 1;
  for (int d = 0; d < dim; ++d) M *= x.size(d);
  for (int d = dim + 1; d < x.dim(); ++d) J *= x.size(d);
  scan_lines<T, A, O><<<grid_for(M * J, c), kThreads, 0, c.stream>>>(x.data<T>(), out.data<O>(), M, N, J, reverse, step);
  check_launch("cumsum");
}

void scan(Op op, const Tensor& out, const Tensor& x, int dim, bool reverse) {
  DL_ASSERT(op == Op::Cumsum || op == Op::Cumprod);
  const fn::ScanStep step{op == Op::Cumprod};
  if (is_floating(x.dtype())) {
    DL_DISPATCH_FLOAT(x.dtype(), op_name(op), (scan_typed<scalar_t, double, scalar_t>(out, x, dim, reverse, step)));
  } else {
    DL_DISPATCH_ALL(x.dtype(), op_name(op), (scan_typed<scalar_t, int64_t, int64_t>(out, x, dim, reverse, step)));
  }
}

void softmax(Op op, const Tensor& out, const Tensor& x, int dim) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && out.dtype() == x.dtype());
  DL_ASSERT(op == Op::Softmax || op == Op::LogSoftmax);
  DL_DISPATCH_FLOAT(x.dtype(), op_name(op), softmax_typed<scalar_t>(op == Op::LogSoftmax, out, x, dim, op_name(op)));
}

void softmax_backward(const Tensor& gx, const Tensor& g, const Tensor& y) {
  DL_ASSERT(gx.is_contiguous() && g.is_contiguous() && y.is_contiguous() && g.dtype() == y.dtype());
  if (y.numel() == 0) return;
  const char* op = "softmax";
  const int64_t N = y.size(y.dim() - 1), M = y.numel() / N;   // y is not empty
  const DeviceContext& c = activate(y, op);
  const int64_t cap = int64_t(c.sm_count) * 16;
  const unsigned grid = unsigned(M < cap ? M : cap);
  DL_DISPATCH_FLOAT(y.dtype(), op, {
    constexpr int W = Vec16<scalar_t>::kWidth, K = 4;
    if (aligned16({&gx, &g, &y}) && N % W == 0 && N <= int64_t(kThreads) * K * W)
      softmax_backward_rows_dense<scalar_t, K><<<grid, kThreads, 0, c.stream>>>(
          gx.data<scalar_t>(), g.data<scalar_t>(), y.data<scalar_t>(), M, N);
    else
      softmax_backward_rows<scalar_t><<<grid, kThreads, 0, c.stream>>>(
          gx.data<scalar_t>(), g.data<scalar_t>(), y.data<scalar_t>(), M, N);
  });
  check_launch(op);
}

}  // namespace dl::gpu
