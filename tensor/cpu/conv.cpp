// CPU convolution: im2col + one GEMM per sample and group (OpenBLAS). Contracts in
// tensor/kernels.def ("neural networks"). Float32 layers with stride 1, one group and few
// output channels take the direct kernels of conv_direct.cpp instead (direct_plan); what
// follows is the general path.
//
// The column matrix of a sample is (C kH kW, Ho Wo): row (c, ki, kj) holds the input
// pixels that kernel tap (ki, kj) of channel c sees at each output position, zeros in
// the padding. Group g's rows are one block, so the whole layout is independent of
// the groups. Then, per sample n and group g, with P = Ho Wo:
//   forward       y[n, g]   (Og, P) = W[g] (Og, Kg) . col[n, g] (Kg, P)      (+ bias)
//   input grad    col[n, g] (Kg, P) = W[g]^T . gy[n, g]; gx[n] = col2im(col[n]);
//                 with stride 1, a forward convolution of gy with W flipped instead
//   weight grad   gW[g]^T  (Kg, Og) += col[n, g] . gy[n, g]^T, transposed at the end
// A 1x1 convolution with stride 1 and no padding needs no columns: x[n] (C, H W) is
// its own column matrix, and the input gradient is written by the GEMM directly.
//
// Threads. OpenBLAS (the pthreads build Debian ships) runs a GEMM on its own thread
// pool when m n k is above 65536 * 4 and on the calling thread otherwise; calling a
// threaded GEMM from inside an OpenMP region would put two pools on the same cores.
// So:
// - layers with few channels (Og Kg times 64 columns within that bound, the usual
//   case): one OpenMP region over the samples, each thread with its own column buffer
//   (one sample's, reused while still in cache) doing im2col, GEMM (and col2im) for
//   its samples, the GEMM cut into calls of as many output columns as keep it on the
//   thread; weight gradients go to one partial sum per thread, added up at the end.
//   One thread pool, and nothing spinning in one pool while the other works;
// - big layers: samples in chunks; im2col / col2im of a chunk split over (sample,
//   channel) pairs by OpenMP, then its GEMMs called one after another from this
//   thread, each threaded by OpenBLAS.
// One scratch allocation per call (through the caching host allocator) holds every
// column buffer and partial sum (the stride-1 input gradient adds the flipped weight).
// The copies work on whole runs of a row, with the bounds of the padding worked out
// once per kernel tap, not per element.

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>

#include "tensor/cpu/conv_direct.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/openblas.h"
#include "tensor/cpu/loops.h"

namespace dl::cpu {

namespace {

// OpenBLAS's GEMM_MULTITHREAD_THRESHOLD (4) times SMP_THRESHOLD_MIN (65536): up to this
// m n k a GEMM runs on the calling thread (interface/gemm.c).
constexpr int64_t kBlasSerialWork = 65536 * 4;
// The fewest output columns per GEMM call worth cutting a sample's GEMM into (on
// AVX-512, 16 x 96 x 144 calls ran as fast as one 16 x 576 x 144 call).
constexpr int64_t kMinColumns = 64;
// A thread's own column buffer is at most this big (large images take the chunked path,
// which keeps one buffer).
constexpr int64_t kThreadColumns = int64_t(8) << 20;
// Column buffers of large convolutions are made for this many bytes of samples at a
// time (at least one sample): small enough to stay in a core's L2 cache between im2col
// writing them and the GEMM reading them (16 MiB made a training step of a 16-channel
// 3x3 net a quarter slower than 1 or 2 MiB).
constexpr int64_t kColumnBudget = int64_t(1) << 20;

struct Geom {
  int64_t N, C, H, W;    // input
  int64_t O, kh, kw;     // weight
  int64_t Ho, Wo, P;     // output, P = Ho Wo
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg, Og, Kg;    // per group: input channels, output channels, Cg kh kw
  int64_t rows;          // C kh kw: rows of a sample's column matrix
  bool direct;           // 1x1, stride 1, no padding: no column matrix
  bool rows_align;       // stride 1 and Wo == W: a tap's pixels are one shifted run
  bool small;            // GEMMs cut small enough to run inside OpenMP threads
  int64_t pb;            // output columns per GEMM call: P, or fewer when small
};

Geom geom_of(const char* op, const Shape& xs, const Shape& ws, const Shape& ys, const Conv2dOpts& o,
             size_t itemsize) {
  Geom g;
  g.N = xs[0]; g.C = xs[1]; g.H = xs[2]; g.W = xs[3];
  g.O = ws[0]; g.kh = ws[2]; g.kw = ws[3];
  g.Ho = ys[2]; g.Wo = ys[3]; g.P = g.Ho * g.Wo;
  g.sh = o.stride[0]; g.sw = o.stride[1];
  g.ph = o.padding[0]; g.pw = o.padding[1];
  g.dh = o.dilation[0]; g.dw = o.dilation[1];
  g.G = o.groups;
  g.Cg = g.C / g.G; g.Og = g.O / g.G;
  g.Kg = g.Cg * g.kh * g.kw;
  g.rows = g.C * g.kh * g.kw;
  g.direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  g.rows_align = g.sh == 1 && g.sw == 1 && g.Wo == g.W;
  // Cut into calls of pb output columns, each GEMM stays on its thread; below
  // kMinColumns per call they lose too much efficiency, so big layers go to OpenBLAS's
  // threads instead.
  g.small = g.Og * g.Kg * std::min(g.P, kMinColumns) <= kBlasSerialWork &&
            g.rows * g.P * int64_t(itemsize) <= kThreadColumns;
  g.pb = g.small ? std::clamp<int64_t>(kBlasSerialWork / (g.Og * g.Kg), 1, g.P) : g.P;
  for (int64_t v : {g.P, g.Kg, g.Og, g.H * g.W})
    DL_CHECK(v <= INT_MAX, op, ": input of shape ", xs, " and weight of shape ", ws,
             " are too large for BLAS (a matrix size exceeds ", INT_MAX, ")");
  return g;
}

// c = op(a) . op(b), or c += op(a) . op(b) when accumulating; row-major.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  openblas().cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                         int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb),
                         accumulate ? 1.0f : 0.0f, c, int(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, bool accumulate, double* c, int64_t ldc) {
  openblas().cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                         int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb),
                         accumulate ? 1.0 : 0.0, c, int(ldc));
}

// The output positions [lo, hi) of a kernel tap at offset `off` (tap * dilation -
// padding) that read inside an input dim of length `len`: lo * s + off >= 0 and
// hi is the first with hi * s + off >= len.
struct Span {
  int64_t lo, hi;
};
Span valid_span(int64_t off, int64_t s, int64_t len, int64_t out) {
  int64_t lo = off >= 0 ? 0 : ceil_div(-off, s);
  int64_t hi = len - off <= 0 ? 0 : ceil_div(len - off, s);
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

// Rows of channels [c0, c1) of one sample's column matrix from its input planes.
template <typename T>
void im2col(const Geom& g, const T* x, T* col, int64_t c0, int64_t c1) {
  const int64_t HW = g.H * g.W, Wo = g.Wo;
  for (int64_t c = c0; c < c1; ++c) {
    const T* plane = x + c * HW;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t yoff = ki * g.dh - g.ph;
      const Span ys = valid_span(yoff, g.sh, g.H, g.Ho);
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t xoff = kj * g.dw - g.pw;
        const Span xs = valid_span(xoff, g.sw, g.W, Wo);
        T* dst = col + ((c * g.kh + ki) * g.kw + kj) * g.P;
        std::fill(dst, dst + ys.lo * Wo, T(0));
        std::fill(dst + ys.hi * Wo, dst + g.Ho * Wo, T(0));
        if (g.rows_align && ys.hi > ys.lo && xs.hi > xs.lo) {
          // Output and input rows have the same length and step: the tap's pixels are
          // one contiguous run, shifted; then the ends of each row, which picked up
          // the neighbouring rows' pixels, are zeroed (they are padding).
          const int64_t b = ys.lo * Wo + xs.lo, e = (ys.hi - 1) * Wo + xs.hi;
          std::memcpy(dst + b, plane + (b + yoff * g.W + xoff), size_t(e - b) * sizeof(T));
          for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
            std::fill(dst + oy * Wo, dst + oy * Wo + xs.lo, T(0));
            std::fill(dst + oy * Wo + xs.hi, dst + (oy + 1) * Wo, T(0));
          }
          continue;
        }
        for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
          T* d = dst + oy * Wo;
          const T* row = plane + (oy * g.sh + yoff) * g.W;  // reads row[ox * sw + xoff]
          std::fill(d, d + xs.lo, T(0));
          if (g.sw == 1) {
            if (xs.hi > xs.lo) copy_run(d + xs.lo, row + (xs.lo + xoff), xs.hi - xs.lo);
          } else {
            for (int64_t ox = xs.lo; ox < xs.hi; ++ox) d[ox] = row[ox * g.sw + xoff];
          }
          std::fill(d + xs.hi, d + Wo, T(0));
        }
      }
    }
  }
}

// Input planes [c0, c1) of one sample = the sum of its column rows put back in place.
// (Only strided convolutions, and stride-1 ones padded beyond the kernel, come here:
// see input_grad_as_conv.)
template <typename T>
void col2im(const Geom& g, const T* col, T* x, int64_t c0, int64_t c1) {
  const int64_t HW = g.H * g.W, Wo = g.Wo;
  for (int64_t c = c0; c < c1; ++c) {
    T* plane = x + c * HW;
    std::fill(plane, plane + HW, T(0));
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t yoff = ki * g.dh - g.ph;
      const Span ys = valid_span(yoff, g.sh, g.H, g.Ho);
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t xoff = kj * g.dw - g.pw;
        const Span xs = valid_span(xoff, g.sw, g.W, Wo);
        const T* src = col + ((c * g.kh + ki) * g.kw + kj) * g.P;
        for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
          const T* s = src + oy * Wo;
          T* row = plane + (oy * g.sh + yoff) * g.W;  // writes row[ox * sw + xoff]
          if (xs.hi <= xs.lo) continue;
          if (g.sw == 1) {
            T* d = row + (xoff + xs.lo);
            const T* sv = s + xs.lo;
            for (int64_t i = 0, m = xs.hi - xs.lo; i < m; ++i) d[i] += sv[i];
          } else {
            for (int64_t ox = xs.lo; ox < xs.hi; ++ox) row[ox * g.sw + xoff] += s[ox];
          }
        }
      }
    }
  }
}

// Calls f(n, buffer, thread) for every sample, one OpenMP thread per range of
// samples; `buffer` is that thread's `per_thread` elements of `scratch`.
template <typename T, typename F>
void per_sample_threads(const Geom& g, T* scratch, int64_t per_thread, F&& f) {
  parallel_units(g.N, g.N * (g.rows + g.O) * g.P, [&](int64_t b, int64_t e, int t) {
    T* buf = scratch + int64_t(t) * per_thread;
    for (int64_t n = b; n < e; ++n) f(n, buf, t);
  });
}

// How many per-thread buffers per_sample_threads can use: a thread with samples to do
// has an id below the sample count.
int64_t buffers(const Geom& g) { return std::min<int64_t>(max_threads(), g.N); }

// For large GEMMs: how many samples' column matrices (laid one after the other in the
// scratch buffer) are made at a time, within kColumnBudget.
int64_t chunk_samples(const Geom& g, size_t itemsize) {
  int64_t per = std::max<int64_t>(1, g.rows * g.P * int64_t(itemsize));
  return std::clamp<int64_t>(kColumnBudget / per, 1, g.N);
}

// Calls f(s, c0, c1) for runs [c0, c1) of the channels of the samples s < nb of a
// chunk, split over (sample, channel) pairs between threads: im2col and col2im of
// a chunk.
template <typename F>
void chunk_channels(const Geom& g, int64_t nb, F&& f) {
  parallel_units(nb * g.C, nb * g.rows * g.P, [&](int64_t b, int64_t e, int) {
    for (int64_t u = b; u < e;) {
      const int64_t s = u / g.C, c0 = u % g.C, c1 = std::min(g.C, c0 + (e - u));
      f(s, c0, c1);
      u += c1 - c0;
    }
  });
}

// ---- forward --------------------------------------------------------------------------

// The direct kernels' plan when they serve the shape (Note [Direct convolution]): float32,
// stride 1, one group, a kernel larger than 1x1, few output channels, and a per-thread
// scratch buffer within kThreadColumns.
std::optional<DirectConv> direct_plan(const Geom& g, DType dtype) {
  if (dtype != DType::Float32 || g.G != 1 || g.sh != 1 || g.sw != 1 ||
      !direct_conv_suits(g.C, g.O, g.kh, g.kw))
    return std::nullopt;
  const DirectConv d = direct_conv_plan(g.C, g.H, g.W, g.O, g.kh, g.kw, g.ph, g.pw, g.dh, g.dw);
  if (d.scratch_len * int64_t(sizeof(float)) > kThreadColumns) return std::nullopt;
  return d;
}

// The direct kernels, one sample per thread at a time. Returns false, having done
// nothing, when they do not serve the shape.
bool forward_direct(const Geom& g, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const std::optional<DirectConv> plan = direct_plan(g, x.dtype());
  if (!plan) return false;
  const DirectConv& d = *plan;
  Tensor scratch = empty(Shape{d.wt_len + buffers(g) * d.scratch_len}, DType::Float32, Device{}, "conv2d");
  Tensor shifts = empty(Shape{d.taps}, DType::Int64, Device{}, "conv2d");
  float* wt = scratch.data<float>();
  int64_t* shift = shifts.data<int64_t>();
  direct_conv_prepare(d, w.data<float>(), wt, shift);
  const float* px = x.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* py = out.data<float>();
  const int64_t xs = g.C * g.H * g.W, ys = g.O * g.P;
  per_sample_threads(g, wt + d.wt_len, d.scratch_len, [&](int64_t n, float* buf, int) {
    direct_conv_sample(d, px + n * xs, (g.N - n) * xs, wt, shift, pb, py + n * ys, buf);
  });
  return true;
}

template <typename T>
void forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  const Geom g = geom_of("conv2d", x.shape(), w.shape(), out.shape(), o, sizeof(T));
  if (forward_direct(g, out, x, w, bias)) return;
  const T* px = x.data<T>();
  const T* pw = w.data<T>();
  const T* pb = bias.defined() ? bias.data<T>() : nullptr;
  T* py = out.data<T>();
  const int64_t xs = g.C * g.H * g.W, ys = g.O * g.P, cs = g.rows * g.P;
  // y[n] = bias (then accumulated into) or written by the GEMMs.
  auto sample = [&](int64_t n, const T* col) {
    T* y = py + n * ys;
    if (pb)
      for (int64_t oc = 0; oc < g.O; ++oc) std::fill(y + oc * g.P, y + (oc + 1) * g.P, pb[oc]);
    for (int64_t gr = 0; gr < g.G; ++gr)
      for (int64_t p0 = 0; p0 < g.P; p0 += g.pb)
        gemm(false, false, g.Og, std::min(g.pb, g.P - p0), g.Kg, pw + gr * g.Og * g.Kg, g.Kg,
             col + gr * g.Kg * g.P + p0, g.P, pb != nullptr, y + gr * g.Og * g.P + p0, g.P);
  };
  if (g.small) {
    Tensor scratch;
    if (!g.direct) scratch = empty(Shape{buffers(g) * cs}, out.dtype(), Device{}, "conv2d");
    T* sp = g.direct ? nullptr : scratch.data<T>();
    per_sample_threads(g, sp, cs, [&](int64_t n, T* col, int) {
      if (g.direct) {
        sample(n, px + n * xs);
      } else {
        im2col(g, px + n * xs, col, 0, g.C);
        sample(n, col);
      }
    });
    return;
  }
  if (g.direct) {
    for (int64_t n = 0; n < g.N; ++n) sample(n, px + n * xs);
    return;
  }
  const int64_t chunk = chunk_samples(g, sizeof(T));
  Tensor scratch = empty(Shape{chunk * cs}, out.dtype(), Device{}, "conv2d");
  T* cols = scratch.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    chunk_channels(g, nb, [&](int64_t s, int64_t c0, int64_t c1) {
      im2col(g, px + (n0 + s) * xs, cols + s * cs, c0, c1);
    });
    for (int64_t s = 0; s < nb; ++s) sample(n0 + s, cols + s * cs);
  }
}

// ---- gradient with respect to the input --------------------------------------------------

// With stride 1 the input gradient is itself a convolution: of gy, padded by
// dilation (k - 1) - padding, with the weight flipped in space and its channel roles
// swapped. That form writes the (small) input gradient with one GEMM per sample and no
// col2im, which reads and writes the plane once per kernel tap. The flipped weight is
// a second, weight-sized allocation.
template <typename T>
bool input_grad_as_conv(const Tensor& gx, const Tensor& gy, const Tensor& w, const Conv2dOpts& o) {
  const int64_t kh = w.size(2), kw = w.size(3);
  if (o.stride[0] != 1 || o.stride[1] != 1 || o.padding[0] > o.dilation[0] * (kh - 1) ||
      o.padding[1] > o.dilation[1] * (kw - 1) || (kh == 1 && kw == 1))
    return false;
  const int64_t G = o.groups, Og = w.size(0) / G, Cg = w.size(1), taps = kh * kw;
  Tensor wf = empty(Shape{G * Cg, Og, kh, kw}, w.dtype(), Device{}, "conv2d_input_grad");
  const T* src = w.data<T>();
  T* dst = wf.data<T>();
  for (int64_t gr = 0; gr < G; ++gr)
    for (int64_t oc = 0; oc < Og; ++oc)
      for (int64_t c = 0; c < Cg; ++c) {
        const T* from = src + ((gr * Og + oc) * Cg + c) * taps;
        T* to = dst + ((gr * Cg + c) * Og + oc) * taps;
        for (int64_t t = 0; t < taps; ++t) to[taps - 1 - t] = from[t];
      }
  Conv2dOpts flipped = o;
  flipped.padding[0] = o.dilation[0] * (kh - 1) - o.padding[0];
  flipped.padding[1] = o.dilation[1] * (kw - 1) - o.padding[1];
  forward<T>(gx, gy, wf, Tensor(), flipped);
  return true;
}

template <typename T>
void input_grad(const Tensor& gx, const Tensor& gy, const Tensor& w, const Conv2dOpts& o) {
  if (input_grad_as_conv<T>(gx, gy, w, o)) return;
  const Geom g = geom_of("conv2d_input_grad", gx.shape(), w.shape(), gy.shape(), o, sizeof(T));
  const T* pg = gy.data<T>();
  const T* pw = w.data<T>();
  T* px = gx.data<T>();
  const int64_t xs = g.C * g.H * g.W, ys = g.O * g.P, cs = g.rows * g.P;
  // col[n] (or gx[n] itself when direct) = W^T gy[n], group by group.
  auto sample = [&](int64_t n, T* col) {
    for (int64_t gr = 0; gr < g.G; ++gr)
      for (int64_t p0 = 0; p0 < g.P; p0 += g.pb)
        gemm(true, false, g.Kg, std::min(g.pb, g.P - p0), g.Og, pw + gr * g.Og * g.Kg, g.Kg,
             pg + n * ys + gr * g.Og * g.P + p0, g.P, false, col + gr * g.Kg * g.P + p0, g.P);
  };
  if (g.small) {
    Tensor scratch;
    if (!g.direct) scratch = empty(Shape{buffers(g) * cs}, gx.dtype(), Device{}, "conv2d_input_grad");
    T* sp = g.direct ? nullptr : scratch.data<T>();
    per_sample_threads(g, sp, cs, [&](int64_t n, T* col, int) {
      if (g.direct) {
        sample(n, px + n * xs);
      } else {
        sample(n, col);
        col2im(g, col, px + n * xs, 0, g.C);
      }
    });
    return;
  }
  if (g.direct) {
    for (int64_t n = 0; n < g.N; ++n) sample(n, px + n * xs);
    return;
  }
  const int64_t chunk = chunk_samples(g, sizeof(T));
  Tensor scratch = empty(Shape{chunk * cs}, gx.dtype(), Device{}, "conv2d_input_grad");
  T* cols = scratch.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    for (int64_t s = 0; s < nb; ++s) sample(n0 + s, cols + s * cs);
    chunk_channels(g, nb, [&](int64_t s, int64_t c0, int64_t c1) {
      col2im(g, cols + s * cs, px + (n0 + s) * xs, c0, c1);
    });
  }
}

// ---- gradient with respect to the weight -------------------------------------------------

// gw[g] (Og, Kg) = acc_t[g]^T, acc_t[g] (Kg, Og) being the sum of nt partial sums `per`
// apart (the first in place).
template <typename T>
void sum_transposed_into(const Geom& g, T* acc_t, int64_t nt, int64_t per, const Tensor& gw) {
  const int64_t wn = g.O * g.Kg;
  for (int64_t t = 1; t < nt; ++t) {
    const T* acc = acc_t + t * per;
    for (int64_t i = 0; i < wn; ++i) acc_t[i] += acc[i];
  }
  T* pw = gw.data<T>();
  for (int64_t gr = 0; gr < g.G; ++gr)
    for (int64_t k = 0; k < g.Kg; ++k)
      for (int64_t oc = 0; oc < g.Og; ++oc) pw[(gr * g.Og + oc) * g.Kg + k] = acc_t[(gr * g.Kg + k) * g.Og + oc];
}

// The direct kernels' weight gradient (the shapes forward_direct takes, when a thread's
// scratch and partial sums stay within kThreadColumns): per thread a scratch buffer,
// then its partial sums. Returns false, having done nothing, when they do not serve the
// shape.
bool weight_grad_direct(const Geom& g, const Tensor& gw, const Tensor& x, const Tensor& gy) {
  const std::optional<DirectConv> plan = direct_plan(g, x.dtype());
  if (!plan || (plan->scratch_len + plan->acc_len) * int64_t(sizeof(float)) > kThreadColumns) return false;
  const DirectConv& d = *plan;
  const int64_t nt = buffers(g), per = d.scratch_len + d.acc_len;
  Tensor scratch = empty(Shape{nt * per}, DType::Float32, Device{}, "conv2d_weight_grad");
  Tensor shifts = empty(Shape{d.taps}, DType::Int64, Device{}, "conv2d_weight_grad");
  float* sp = scratch.data<float>();
  int64_t* shift = shifts.data<int64_t>();
  direct_conv_prepare(d, nullptr, nullptr, shift);
  for (int64_t t = 0; t < nt; ++t) std::fill(sp + t * per + d.scratch_len, sp + (t + 1) * per, 0.0f);
  const float* px = x.data<float>();
  const float* pg = gy.data<float>();
  const int64_t xs = g.C * g.H * g.W, ys = g.O * g.P;
  per_sample_threads(g, sp, per, [&](int64_t n, float* buf, int) {
    direct_conv_weight_grad_sample(d, px + n * xs, pg + n * ys, shift, buf + d.scratch_len, buf);
  });
  for (int64_t t = 0; t < nt; ++t) {
    float* acc = sp + t * per + d.scratch_len;
    direct_conv_weight_grad_total(d, acc, acc);
  }
  sum_transposed_into(g, sp + d.scratch_len, nt, per, gw);
  return true;
}

// Accumulated transposed, gW[g]^T (Kg, Og) += col[n, g] (Kg, P) . gy[n, g]^T: the same
// products, but OpenBLAS's AVX-512 kernels ran this shape (a narrow result) about a
// fifth faster than gy . col^T for the 16-channel 3x3 layers of small image models;
// the sum is transposed into gw once at the end.
template <typename T>
void weight_grad(const Tensor& gw, const Tensor& x, const Tensor& gy, const Conv2dOpts& o) {
  const Geom g = geom_of("conv2d_weight_grad", x.shape(), gw.shape(), gy.shape(), o, sizeof(T));
  if (weight_grad_direct(g, gw, x, gy)) return;
  const T* px = x.data<T>();
  const T* pg = gy.data<T>();
  const int64_t xs = g.C * g.H * g.W, ys = g.O * g.P, cs = g.rows * g.P, wn = g.O * g.Kg;
  auto sample = [&](int64_t n, const T* col, T* acc_t, bool accumulate) {
    for (int64_t gr = 0; gr < g.G; ++gr)
      for (int64_t p0 = 0; p0 < g.P; p0 += g.pb)
        gemm(false, true, g.Kg, g.Og, std::min(g.pb, g.P - p0), col + gr * g.Kg * g.P + p0, g.P,
             pg + n * ys + gr * g.Og * g.P + p0, g.P, accumulate || p0 > 0, acc_t + gr * g.Kg * g.Og, g.Og);
  };
  if (g.small) {
    // Per thread: a column buffer (unless direct), then a partial sum, zeroed first
    // since a thread may get no sample.
    const int64_t nt = buffers(g);
    const int64_t per = (g.direct ? 0 : cs) + wn;
    Tensor scratch = empty(Shape{nt * per}, gw.dtype(), Device{}, "conv2d_weight_grad");
    T* sp = scratch.data<T>();
    for (int64_t t = 0; t < nt; ++t) std::fill(sp + t * per + per - wn, sp + (t + 1) * per, T(0));
    per_sample_threads(g, sp, per, [&](int64_t n, T* buf, int) {
      T* acc = buf + per - wn;
      if (g.direct) {
        sample(n, px + n * xs, acc, true);
      } else {
        im2col(g, px + n * xs, buf, 0, g.C);
        sample(n, buf, acc, true);
      }
    });
    sum_transposed_into(g, sp + per - wn, nt, per, gw);
    return;
  }
  const int64_t chunk = g.direct ? 0 : chunk_samples(g, sizeof(T));
  Tensor scratch = empty(Shape{chunk * cs + wn}, gw.dtype(), Device{}, "conv2d_weight_grad");
  T* cols = scratch.data<T>();
  T* acc = cols + chunk * cs;
  if (g.direct) {
    for (int64_t n = 0; n < g.N; ++n) sample(n, px + n * xs, acc, n > 0);
  } else {
    for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
      const int64_t nb = std::min(chunk, g.N - n0);
      chunk_channels(g, nb, [&](int64_t s, int64_t c0, int64_t c1) {
        im2col(g, px + (n0 + s) * xs, cols + s * cs, c0, c1);
      });
      for (int64_t s = 0; s < nb; ++s) sample(n0 + s, cols + s * cs, acc, n0 + s > 0);
    }
  }
  sum_transposed_into(g, acc, 1, 0, gw);
}

}  // namespace

void conv2d(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  DL_DISPATCH_FLOAT(out.dtype(), "conv2d", forward<scalar_t>(out, x, w, bias, o));
}

void conv2d_input_grad(const Tensor& gx, const Tensor& g, const Tensor& w, const Conv2dOpts& o) {
  DL_DISPATCH_FLOAT(gx.dtype(), "conv2d_input_grad", input_grad<scalar_t>(gx, g, w, o));
}

void conv2d_weight_grad(const Tensor& gw, const Tensor& x, const Tensor& g, const Conv2dOpts& o) {
  DL_DISPATCH_FLOAT(gw.dtype(), "conv2d_weight_grad", weight_grad<scalar_t>(gw, x, g, o));
}

}  // namespace dl::cpu
