// CPU pooling kernels: max and average over 2-D windows, and their gradients.
// Contracts in tensor/kernels.def ("neural networks"); window bounds follow PyTorch's
// kernels (aten/src/ATen/native/cpu/*Pool*), including the ceil_mode divisor rule.
//
// Every (sample, channel) plane is independent: threads split the planes, so the
// gradients, which add into their plane, never race. Window bounds are clipped once
// per output row and column, never tested per element.
#include <algorithm>
#include <atomic>
#include <bit>
#include <type_traits>
#include <cmath>
#include <limits>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace dl::cpu {

namespace {

struct PoolGeom {
  int64_t planes, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw;
};

PoolGeom pool_geom(const Shape& in, const Shape& out, const Pool2dOpts& o) {
  return {in[0] * in[1], in[2], in[3], out[2], out[3],
          o.kernel[0], o.kernel[1], o.stride[0], o.stride[1], o.padding[0], o.padding[1]};
}

// The window of output position `i` along one dim: [lo, hi) clipped to the input,
// and the size of the window clipped only to the padded input (avg's divisor with
// count_include_pad).
struct Window {
  int64_t lo, hi, padded;
};
Window window(int64_t i, int64_t s, int64_t p, int64_t k, int64_t len) {
  int64_t lo = i * s - p;
  int64_t hi = std::min(lo + k, len + p);
  int64_t padded = hi - lo;
  return {std::max<int64_t>(lo, 0), std::min(hi, len), padded};
}

// The maximum of one window (clipped to the input) and, when kIdx, its index: the
// first position holding it, or the last NaN when there is one, as PyTorch's kernel
// ("larger, or NaN, replaces"). Written without data-dependent branches, which on real
// data are coin flips: the value by max (maxss), then the index by a reverse scan
// for the first element with the same bits (it is one of them, so that is the first
// maximum, -0.0 and +0.0 included). Windows with a NaN, rare, take the plain loop.
template <typename T, bool kIdx>
void max_window(const PoolGeom& g, const T* plane, const Window& wy, const Window& wx, T* y, int64_t* yi) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  T best = -std::numeric_limits<T>::infinity();
  bool nan = false;
  for (int64_t iy = wy.lo; iy < wy.hi; ++iy) {
    const T* row = plane + iy * g.W;
    for (int64_t ix = wx.lo; ix < wx.hi; ++ix) {
      const T v = row[ix];
      best = v > best ? v : best;
      nan |= v != v;
    }
  }
  int64_t at = wy.lo * g.W + wx.lo;
  if (nan) {
    for (int64_t iy = wy.lo; iy < wy.hi; ++iy)
      for (int64_t ix = wx.lo; ix < wx.hi; ++ix)
        if (std::isnan(plane[iy * g.W + ix])) {
          best = plane[iy * g.W + ix];
          at = iy * g.W + ix;
        }
  } else if constexpr (kIdx) {
    const Bits want = std::bit_cast<Bits>(best);
    for (int64_t iy = wy.hi - 1; iy >= wy.lo; --iy) {
      const T* row = plane + iy * g.W;
      for (int64_t ix = wx.hi - 1; ix >= wx.lo; --ix)
        at = std::bit_cast<Bits>(row[ix]) == want ? iy * g.W + ix : at;
    }
  }
  *y = best;
  if constexpr (kIdx) *yi = at;
}

template <typename T, bool kIdx>
void max_plane(const PoolGeom& g, const T* plane, T* y, int64_t* yi) {
  for (int64_t oy = 0; oy < g.Ho; ++oy) {
    const Window wy = window(oy, g.sh, g.ph, g.kh, g.H);
    for (int64_t ox = 0; ox < g.Wo; ++ox)
      max_window<T, kIdx>(g, plane, wy, window(ox, g.sw, g.pw, g.kw, g.W), y + oy * g.Wo + ox,
                          kIdx ? yi + oy * g.Wo + ox : nullptr);
  }
}

template <typename T>
void max_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dOpts& o) {
  const PoolGeom g = pool_geom(x.shape(), out.shape(), o);
  const T* px = x.data<T>();
  T* py = out.data<T>();
  int64_t* pi = indices.defined() ? indices.data<int64_t>() : nullptr;
  const int64_t HW = g.H * g.W, P = g.Ho * g.Wo;
  parallel_units(g.planes, double(g.planes) * (double(HW) + double(P) * g.kh * g.kw), [&](int64_t b, int64_t e, int) {
    for (int64_t pl = b; pl < e; ++pl) {
      if (pi) max_plane<T, true>(g, px + pl * HW, py + pl * P, pi + pl * P);
      else max_plane<T, false>(g, px + pl * HW, py + pl * P, nullptr);
    }
  });
}

template <typename T>
void max_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices) {
  const int64_t planes = gx.size(0) * gx.size(1), HW = gx.size(2) * gx.size(3);
  const int64_t P = gy.size(2) * gy.size(3);
  const T* pg = gy.data<T>();
  const int64_t* pi = indices.data<int64_t>();
  T* px = gx.data<T>();
  // A bad index (only possible for indices not made by max_pool2d) is reported after
  // the threads are done: an exception must not leave an OpenMP region.
  std::atomic<int64_t> bad{0};
  std::atomic<bool> any_bad{false};
  parallel_units(planes, planes * (HW + P), [&](int64_t b, int64_t e, int) {
    for (int64_t pl = b; pl < e; ++pl) {
      T* plane = px + pl * HW;
      std::fill(plane, plane + HW, T(0));
      const T* g = pg + pl * P;
      const int64_t* idx = pi + pl * P;
      for (int64_t i = 0; i < P; ++i) {
        const int64_t k = idx[i];
        if (k < 0 || k >= HW) {
          bad.store(k, std::memory_order_relaxed);
          any_bad.store(true, std::memory_order_relaxed);
          continue;
        }
        plane[k] += g[i];
      }
    }
  });
  if (any_bad.load())
    fail(ErrorKind::Index, "max_pool2d_backward: index ", bad.load(), " is out of range for a plane of ",
         HW, " elements ", Shape{gx.size(2), gx.size(3)});
}

template <typename T>
void avg_forward(const Tensor& out, const Tensor& x, const Pool2dOpts& o) {
  const PoolGeom g = pool_geom(x.shape(), out.shape(), o);
  const T* px = x.data<T>();
  T* py = out.data<T>();
  const int64_t HW = g.H * g.W, P = g.Ho * g.Wo;
  parallel_units(g.planes, double(g.planes) * (double(HW) + double(P) * g.kh * g.kw), [&](int64_t b, int64_t e, int) {
    for (int64_t pl = b; pl < e; ++pl) {
      const T* plane = px + pl * HW;
      T* y = py + pl * P;
      for (int64_t oy = 0; oy < g.Ho; ++oy) {
        const Window wy = window(oy, g.sh, g.ph, g.kh, g.H);
        for (int64_t ox = 0; ox < g.Wo; ++ox) {
          const Window wx = window(ox, g.sw, g.pw, g.kw, g.W);
          if (wy.lo >= wy.hi || wx.lo >= wx.hi) {
            y[oy * g.Wo + ox] = T(0);
            continue;
          }
          const double div = o.count_include_pad ? double(wy.padded) * double(wx.padded)
                                                  : (wy.hi - wy.lo) * (wx.hi - wx.lo);
          T sum = T(0);
          for (int64_t iy = wy.lo; iy < wy.hi; ++iy) {
            const T* row = plane + iy * g.W;
            for (int64_t ix = wx.lo; ix < wx.hi; ++ix) sum += row[ix];
          }
          y[oy * g.Wo + ox] = sum / T(div);
        }
      }
    }
  });
}

template <typename T>
void avg_backward(const Tensor& gx, const Tensor& gy, const Pool2dOpts& o) {
  const PoolGeom g = pool_geom(gx.shape(), gy.shape(), o);
  const T* pg = gy.data<T>();
  T* px = gx.data<T>();
  const int64_t HW = g.H * g.W, P = g.Ho * g.Wo;
  parallel_units(g.planes, double(g.planes) * (double(HW) + double(P) * g.kh * g.kw), [&](int64_t b, int64_t e, int) {
    for (int64_t pl = b; pl < e; ++pl) {
      T* plane = px + pl * HW;
      std::fill(plane, plane + HW, T(0));
      const T* gp = pg + pl * P;
      for (int64_t oy = 0; oy < g.Ho; ++oy) {
        const Window wy = window(oy, g.sh, g.ph, g.kh, g.H);
        for (int64_t ox = 0; ox < g.Wo; ++ox) {
          const Window wx = window(ox, g.sw, g.pw, g.kw, g.W);
          if (wy.lo >= wy.hi || wx.lo >= wx.hi) continue;
          const double div = o.count_include_pad ? double(wy.padded) * double(wx.padded)
                                                  : (wy.hi - wy.lo) * (wx.hi - wx.lo);
          const T v = gp[oy * g.Wo + ox] / T(div);
          for (int64_t iy = wy.lo; iy < wy.hi; ++iy) {
            T* row = plane + iy * g.W;
            for (int64_t ix = wx.lo; ix < wx.hi; ++ix) row[ix] += v;
          }
        }
      }
    }
  });
}

}  // namespace

void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dOpts& o) {
  DL_DISPATCH_FLOAT(x.dtype(), "max_pool2d", max_forward<scalar_t>(out, indices, x, o));
}
void max_pool2d_backward(const Tensor& gx, const Tensor& g, const Tensor& indices) {
  DL_DISPATCH_FLOAT(gx.dtype(), "max_pool2d_backward", max_backward<scalar_t>(gx, g, indices));
}
void avg_pool2d(const Tensor& out, const Tensor& x, const Pool2dOpts& o) {
  DL_DISPATCH_FLOAT(x.dtype(), "avg_pool2d", avg_forward<scalar_t>(out, x, o));
}
void avg_pool2d_backward(const Tensor& gx, const Tensor& g, const Pool2dOpts& o) {
  DL_DISPATCH_FLOAT(gx.dtype(), "avg_pool2d_backward", avg_backward<scalar_t>(gx, g, o));
}

}  // namespace dl::cpu
