// CUDA kernels of pooling, batch-norm statistics and the per-channel affine map, and
// the fused cross-entropy (contracts in tensor/kernels.def, "neural networks"; the CPU
// versions are tensor/cpu/pool.cpp, norm.cpp and loss.cpp, whose window bounds and
// NaN rules these follow). Every tensor is contiguous and non-empty, floating.
#include <cmath>
#include <cstring>

#include "gpu/loops.cuh"
#include "tensor/norm_functors.h"

namespace dl::gpu {

namespace {

// ---- pooling ------------------------------------------------------------------------

struct PoolGeom {
  int64_t planes, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
};

PoolGeom pool_geom(const Shape& in, const Shape& out, const Pool2dOpts& o) {
  return {in[0] * in[1], in[2], in[3], out[2], out[3], o.kernel[0], o.kernel[1], o.stride[0],
          o.stride[1], o.padding[0], o.padding[1], o.count_include_pad};
}

// The window of output position i along one dim: [lo, hi) clipped to the input, and
// its size clipped only to the padded input (avg's divisor with count_include_pad).
struct Window {
  int64_t lo, hi, padded;
};
__device__ __forceinline__ Window window(int64_t i, int64_t s, int64_t p, int64_t k, int64_t len) {
  const int64_t lo = i * s - p;
  const int64_t hi = lo + k < len + p ? lo + k : len + p;
  return {lo > 0 ? lo : 0, hi < len ? hi : len, hi - lo};
}

template <typename T>
__device__ __forceinline__ uint64_t bits_of(T v) {
  if constexpr (sizeof(T) == 4) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return b;
  } else {
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
  }
}

// The maximum of each window, and (when `yi`) the first position holding it, or the
// last NaN of the window when it has one: the CPU kernel's rule.
template <typename T>
__global__ void __launch_bounds__(kThreads) max_pool_kernel(PoolGeom g, const T* x, T* y, int64_t* yi) {
  const int64_t total = g.planes * g.Ho * g.Wo, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t ox = t % g.Wo, oy = (t / g.Wo) % g.Ho, pl = t / (g.Wo * g.Ho);
    const Window wy = window(oy, g.sh, g.ph, g.kh, g.H), wx = window(ox, g.sw, g.pw, g.kw, g.W);
    const T* plane = x + pl * g.H * g.W;
    T best = -INFINITY;
    int64_t at = wy.lo * g.W + wx.lo, nan_at = -1;
    for (int64_t iy = wy.lo; iy < wy.hi; ++iy)
      for (int64_t ix = wx.lo; ix < wx.hi; ++ix) {
        const T v = plane[iy * g.W + ix];
        best = v > best ? v : best;
        if (v != v) nan_at = iy * g.W + ix;
      }
    if (nan_at >= 0) {
      best = plane[nan_at];
      at = nan_at;
    } else if (yi) {
      const uint64_t want = bits_of(best);
      bool found = false;
      for (int64_t iy = wy.lo; iy < wy.hi && !found; ++iy)
        for (int64_t ix = wx.lo; ix < wx.hi; ++ix)
          if (bits_of(plane[iy * g.W + ix]) == want) {
            at = iy * g.W + ix;
            found = true;
            break;
          }
    }
    y[t] = best;
    if (yi) yi[t] = at;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
max_pool_backward_kernel(int64_t planes, int64_t HW, int64_t P, const T* g, const int64_t* idx, T* gx,
                         BadIndexSlot bad) {
  const int64_t total = planes * P, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t k = idx[t];
    if (k < 0 || k >= HW) {
      bad.record(t);
      continue;
    }
    atomicAdd(gx + (t / P) * HW + k, g[t]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) avg_pool_kernel(PoolGeom g, const T* x, T* y) {
  const int64_t total = g.planes * g.Ho * g.Wo, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t ox = t % g.Wo, oy = (t / g.Wo) % g.Ho, pl = t / (g.Wo * g.Ho);
    const Window wy = window(oy, g.sh, g.ph, g.kh, g.H), wx = window(ox, g.sw, g.pw, g.kw, g.W);
    if (wy.lo >= wy.hi || wx.lo >= wx.hi) {
      y[t] = T(0);
      continue;
    }
    const double div = g.count_include_pad ? double(wy.padded) * double(wx.padded)
                                            : double((wy.hi - wy.lo) * (wx.hi - wx.lo));
    const T* plane = x + pl * g.H * g.W;
    T sum = T(0);
    for (int64_t iy = wy.lo; iy < wy.hi; ++iy)
      for (int64_t ix = wx.lo; ix < wx.hi; ++ix) sum += plane[iy * g.W + ix];
    y[t] = sum / T(div);
  }
}

// The adjoint, gathered: each input element sums g / divisor over the windows holding
// it, in the order the CPU kernel adds them (oy, then ox, ascending).
template <typename T>
__global__ void __launch_bounds__(kThreads) avg_pool_backward_kernel(PoolGeom g, const T* gy, T* gx) {
  const int64_t total = g.planes * g.H * g.W, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t ix = t % g.W, iy = (t / g.W) % g.H, pl = t / (g.W * g.H);
    // Windows with lo <= i < lo + k, lo = o * s - p.
    auto first = [](int64_t i, int64_t s, int64_t p, int64_t k) {
      const int64_t num = i + p - k + 1;
      return num <= 0 ? int64_t(0) : (num + s - 1) / s;
    };
    const int64_t oy0 = first(iy, g.sh, g.ph, g.kh), ox0 = first(ix, g.sw, g.pw, g.kw);
    int64_t oy1 = (iy + g.ph) / g.sh, ox1 = (ix + g.pw) / g.sw;
    if (oy1 > g.Ho - 1) oy1 = g.Ho - 1;
    if (ox1 > g.Wo - 1) ox1 = g.Wo - 1;
    const T* gp = gy + pl * g.Ho * g.Wo;
    T acc = T(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy) {
      const Window wy = window(oy, g.sh, g.ph, g.kh, g.H);
      if (wy.lo >= wy.hi) continue;
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const Window wx = window(ox, g.sw, g.pw, g.kw, g.W);
        if (wx.lo >= wx.hi) continue;
        const double div = g.count_include_pad ? double(wy.padded) * double(wx.padded)
                                                : double((wy.hi - wy.lo) * (wx.hi - wx.lo));
        acc += gp[oy * g.Wo + ox] / T(div);
      }
    }
    gx[t] = acc;
  }
}

// ---- batch normalisation ------------------------------------------------------------------

template <typename A>
__device__ A block_sum(A* sh, A v) {
  const int t = int(threadIdx.x);
  sh[t] = v;
  __syncthreads();
  for (int w = int(blockDim.x) / 2; w > 0; w /= 2) {
    if (t < w) sh[t] += sh[t + w];
    __syncthreads();
  }
  const A out = sh[0];
  __syncthreads();
  return out;
}

// Blocks for a kernel that gives a block to each of n channels or rows (grid-stride past
// 16 blocks per multiprocessor).
inline unsigned row_blocks(const DeviceContext& c, int64_t n) {
  return unsigned(n < int64_t(c.sm_count) * 16 ? n : int64_t(c.sm_count) * 16);
}

// A block per channel: the mean in double, then the mean squared deviation from it.
template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_stats_kernel(const T* x, T* mean, T* var, int64_t N, int64_t C, int64_t S) {
  __shared__ double sh[kThreads];
  const int64_t count = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double sum = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) sum += double(x[((e / S) * C + c) * S + e % S]);
    const double m = block_sum(sh, sum) / double(count);
    double sq = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
      const double d = double(x[((e / S) * C + c) * S + e % S]) - m;
      sq += d * d;
    }
    sq = block_sum(sh, sq);
    if (threadIdx.x == 0) {
      mean[c] = T(m);
      var[c] = T(sq / double(count));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
affine_kernel(const T* x, const T* a, const T* b, T* y, int64_t total, int64_t C, int64_t S) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t c = (t / S) % C;
    y[t] = x[t] * a[c] + b[c];
  }
}

// ---- layer normalisation ----------------------------------------------------------------
// A block per row (grid-stride over rows): the statistics summed in double by the
// block, then fn::LayerNormY / fn::LayerNormDx per element, as the CPU kernels.

template <typename T>
__global__ void __launch_bounds__(kThreads)
layer_norm_kernel(const T* x, const T* w, const T* b, T* y, T* mean, T* invstd, int64_t R, int64_t D, double eps) {
  __shared__ double sh[kThreads];
  const fn::LayerNormY f;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* in = x + r * D;
    double sum = 0;
    for (int64_t s = threadIdx.x; s < D; s += blockDim.x) sum += double(in[s]);
    const double m = block_sum(sh, sum) / double(D);
    double sq = 0;
    for (int64_t s = threadIdx.x; s < D; s += blockDim.x) {
      const double d = double(in[s]) - m;
      sq += d * d;
    }
    const double inv = 1 / sqrt(block_sum(sh, sq) / double(D) + eps);
    if (threadIdx.x == 0) {
      mean[r] = T(m);
      invstd[r] = T(inv);
    }
    const T tm = T(m), ti = T(inv);
    for (int64_t s = threadIdx.x; s < D; s += blockDim.x) y[r * D + s] = f(in[s], tm, ti, w[s], b[s]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
layer_norm_backward_kernel(const T* g, const T* x, const T* mean, const T* invstd, const T* w, T* dx,
                           int64_t R, int64_t D) {
  __shared__ double sh[kThreads];
  const fn::LayerNormDx f;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* in = x + r * D;
    const T* gr = g + r * D;
    const T m = mean[r], inv = invstd[r];
    double a = 0, c = 0;
    for (int64_t s = threadIdx.x; s < D; s += blockDim.x) {
      const T gw = gr[s] * w[s];
      a += double(gw);
      c += double(gw) * double((in[s] - m) * inv);
    }
    const T mg = T(block_sum(sh, a) / double(D));
    const T mgx = T(block_sum(sh, c) / double(D));
    for (int64_t s = threadIdx.x; s < D; s += blockDim.x) {
      const T xhat = (in[s] - m) * inv;
      dx[r * D + s] = f(gr[s] * w[s], xhat, inv, mg, mgx);
    }
  }
}

// The weight's and bias's gradients: a thread per column, summing over the rows in
// double (neighbouring threads read neighbouring columns).
template <typename T>
__global__ void __launch_bounds__(kThreads)
layer_norm_params_kernel(const T* g, const T* x, const T* mean, const T* invstd, T* dw, T* db, int64_t R, int64_t D) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < D; k += step) {
    double sw = 0, sb = 0;
    for (int64_t r = 0; r < R; ++r) {
      const T gv = g[r * D + k];
      sw += double(gv * ((x[r * D + k] - mean[r]) * invstd[r]));
      sb += double(gv);
    }
    if (dw) dw[k] = T(sw);
    if (db) db[k] = T(sb);
  }
}

// ---- cross-entropy ----------------------------------------------------------------------

// A warp per row: logsumexp(row) - row[target], the max taken out first (the CPU's
// "larger replaces" max, which keeps a NaN only in the first place), the exponentials
// summed in double.
template <typename T>
__global__ void __launch_bounds__(kThreads)
cross_entropy_kernel(const T* logits, const int64_t* target, T* loss, int64_t N, int64_t C, bool has_ignore,
                     int64_t ignore, BadIndexSlot bad) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < N; i += warps) {
    const int64_t t = target[i];
    if ((has_ignore && t == ignore) || t < 0 || t >= C) {
      if (lane == 0) {
        loss[i] = T(0);
        if (!(has_ignore && t == ignore)) bad.record(i);
      }
      continue;
    }
    const T* row = logits + i * C;
    T m = -INFINITY;
    for (int64_t j = lane; j < C; j += 32) m = row[j] > m ? row[j] : m;
    for (int o = 16; o > 0; o /= 2) {
      const T other = __shfl_xor_sync(0xffffffffu, m, o);
      m = other > m ? other : m;
    }
    if (row[0] != row[0]) m = row[0];
    double sum = 0;
    for (int64_t j = lane; j < C; j += 32) sum += std::exp(double(row[j]) - double(m));
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) loss[i] = T(double(m) + std::log(sum) - double(row[t]));
  }
}

}  // namespace

void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dOpts& o) {
  const char* op = "max_pool2d";
  const DeviceContext& c = activate(out, op);
  const PoolGeom g = pool_geom(x.shape(), out.shape(), o);
  DL_DISPATCH_FLOAT(x.dtype(), op, {
    max_pool_kernel<scalar_t><<<grid_for(out.numel(), c), kThreads, 0, c.stream>>>(
        g, x.data<scalar_t>(), out.data<scalar_t>(), indices.defined() ? indices.data<int64_t>() : nullptr);
  });
  check_launch(op);
}

void max_pool2d_backward(const Tensor& gx, const Tensor& g, const Tensor& indices) {
  const char* op = "max_pool2d_backward";
  const DeviceContext& c = activate(gx, op);
  const int64_t planes = gx.size(0) * gx.size(1), HW = gx.size(2) * gx.size(3);
  const int64_t P = g.size(2) * g.size(3);
  check_cuda(cudaMemsetAsync(gx.raw_data(), 0, size_t(gx.numel()) * gx.itemsize(), c.stream), op,
             "zeroing the gradient");
  BadIndexCheck check(c, op);
  DL_DISPATCH_FLOAT(gx.dtype(), op, {
    max_pool_backward_kernel<scalar_t><<<grid_for(g.numel(), c), kThreads, 0, c.stream>>>(
        planes, HW, P, g.data<scalar_t>(), indices.data<int64_t>(), gx.data<scalar_t>(), check.slot());
  });
  check_launch(op);
  const int64_t bad = check.first_bad();
  if (bad >= 0)
    fail(ErrorKind::Index, op, ": index ", index_value_at(indices, bad, op), " is out of range for a plane of ",
         HW, " elements ", Shape{gx.size(2), gx.size(3)});
}

void avg_pool2d(const Tensor& out, const Tensor& x, const Pool2dOpts& o) {
  const char* op = "avg_pool2d";
  const DeviceContext& c = activate(out, op);
  const PoolGeom g = pool_geom(x.shape(), out.shape(), o);
  DL_DISPATCH_FLOAT(x.dtype(), op, {
    avg_pool_kernel<scalar_t><<<grid_for(out.numel(), c), kThreads, 0, c.stream>>>(g, x.data<scalar_t>(),
                                                                                   out.data<scalar_t>());
  });
  check_launch(op);
}

void avg_pool2d_backward(const Tensor& gx, const Tensor& g, const Pool2dOpts& o) {
  const char* op = "avg_pool2d_backward";
  const DeviceContext& c = activate(gx, op);
  const PoolGeom geom = pool_geom(gx.shape(), g.shape(), o);
  DL_DISPATCH_FLOAT(gx.dtype(), op, {
    avg_pool_backward_kernel<scalar_t><<<grid_for(gx.numel(), c), kThreads, 0, c.stream>>>(
        geom, g.data<scalar_t>(), gx.data<scalar_t>());
  });
  check_launch(op);
}

void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  const char* op = "batch_norm";
  const DeviceContext& c = activate(x, op);
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const unsigned blocks = row_blocks(c, C);
  DL_DISPATCH_FLOAT(x.dtype(), op, {
    bn_stats_kernel<scalar_t><<<blocks, kThreads, 0, c.stream>>>(
        x.data<scalar_t>(), mean.data<scalar_t>(), var.data<scalar_t>(), N, C, S);
  });
  check_launch(op);
}

void channel_affine(const Tensor& out, const Tensor& x, const Tensor& scale, const Tensor& shift) {
  const char* op = "batch_norm";
  const DeviceContext& c = activate(out, op);
  const int64_t C = x.size(1), S = x.size(2);
  DL_DISPATCH_FLOAT(x.dtype(), op, {
    affine_kernel<scalar_t><<<grid_for(x.numel(), c), kThreads, 0, c.stream>>>(
        x.data<scalar_t>(), scale.data<scalar_t>(), shift.data<scalar_t>(), out.data<scalar_t>(), x.numel(), C, S);
  });
  check_launch(op);
}

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  const DeviceContext& c = activate(x, op);
  const int64_t R = x.size(0), D = x.size(1);
  const unsigned blocks = row_blocks(c, R);
  DL_DISPATCH_FLOAT(x.dtype(), op, {
    layer_norm_kernel<scalar_t><<<blocks, kThreads, 0, c.stream>>>(
        x.data<scalar_t>(), weight.data<scalar_t>(), bias.data<scalar_t>(), y.data<scalar_t>(),
        mean.data<scalar_t>(), invstd.data<scalar_t>(), R, D, eps);
  });
  check_launch(op);
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& g,
                         const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight) {
  const char* op = "layer_norm";
  const DeviceContext& c = activate(x, op);
  const int64_t R = x.size(0), D = x.size(1);
  const unsigned blocks = row_blocks(c, R);
  DL_DISPATCH_FLOAT(x.dtype(), op, {
    layer_norm_backward_kernel<scalar_t><<<blocks, kThreads, 0, c.stream>>>(
        g.data<scalar_t>(), x.data<scalar_t>(), mean.data<scalar_t>(), invstd.data<scalar_t>(),
        weight.data<scalar_t>(), dx.data<scalar_t>(), R, D);
    if (dweight.defined() || dbias.defined())
      layer_norm_params_kernel<scalar_t><<<grid_for(D, c), kThreads, 0, c.stream>>>(
          g.data<scalar_t>(), x.data<scalar_t>(), mean.data<scalar_t>(), invstd.data<scalar_t>(),
          dweight.defined() ? dweight.data<scalar_t>() : nullptr, dbias.defined() ? dbias.data<scalar_t>() : nullptr,
          R, D);
  });
  check_launch(op);
}

void cross_entropy(const Tensor& loss, const Tensor& logits, const Tensor& target,
                   std::optional<int64_t> ignore_index) {
  const char* op = "cross_entropy";
  const DeviceContext& c = activate(loss, op);
  const int64_t N = logits.size(0), C = logits.size(1);
  BadIndexCheck check(c, op);
  DL_DISPATCH_FLOAT(logits.dtype(), op, {
    cross_entropy_kernel<scalar_t><<<grid_for(N * 32, c), kThreads, 0, c.stream>>>(
        logits.data<scalar_t>(), target.data<int64_t>(), loss.data<scalar_t>(), N, C, ignore_index.has_value(),
        ignore_index.value_or(0), check.slot());
  });
  check_launch(op);
  const int64_t bad = check.first_bad();
  if (bad >= 0)
    fail(ErrorKind::Index, op, ": target ", index_value_at(target, bad, op), " is out of range for ", C,
         " classes (expected 0..", C - 1, ")");
}

}  // namespace dl::gpu
