// CPU kernels of batch normalisation (per-channel statistics and the per-channel
// affine map that applies them) and of layer normalisation (a row at a time, forward
// and backward). Contracts in tensor/kernels.def ("neural networks").
//
// Batch norm's x is (N, C, S): channel c is N runs of S contiguous elements; layer
// norm's is (R, D), a row of D contiguous elements per unit. Statistics are accumulated
// in double whatever the dtype, mean first and then squared deviations from it (two
// passes: the one-pass E[x^2] - E[x]^2 cancels catastrophically for data far from
// zero). Threads split the channels (rows) for the statistics and the (n, c) rows for
// the affine map.
#include <cmath>
#include <vector>

#include "tensor/cpu/lanes.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/norm_functors.h"
#include "tensor/reduce_functors.h"

namespace dl::cpu {

namespace {

// A run's sum, and its sum of squared deviations from m, in double: the reductions' own
// folds (tensor/cpu/lanes.h, built for AVX2 and AVX-512 too), so that a mean or
// variance here has the bits of x:mean() and x:var() over the same run. (Summed in one
// double accumulator, a chain of dependent additions, they were the slowest part of
// bench/'s `layernorm` row.)
template <typename T>
[[gnu::always_inline]] inline double run_sum(const T* p, int64_t n) {
  return double(fold_run(fn::SumRed<T>{}, p, n, 1, 0.0));
}
template <typename T>
[[gnu::always_inline]] inline double run_sq(const T* p, int64_t n, double m) {
  return fold_run(fn::VarRed<T>{}, p, n, 1, m);
}

// Batch norm's statistics of channels [b, e).
template <typename T>
void stats_channels(const T* px, T* pm, T* pv, int64_t N, int64_t C, int64_t S, int64_t b, int64_t e) {
  const double count = double(N) * double(S);
  for (int64_t c = b; c < e; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) sum += run_sum(px + (n * C + c) * S, S);
    const double m = sum / count;
    double sq = 0;
    for (int64_t n = 0; n < N; ++n) sq += run_sq(px + (n * C + c) * S, S, m);
    pm[c] = T(m);
    pv[c] = T(sq / count);
  }
}

// Layer norm's rows [b, e) forward: statistics, then fn::LayerNormY.
template <typename T>
[[gnu::always_inline]] inline void ln_rows(const T* px, const T* pw, const T* pb, T* py, T* pm, T* pi, int64_t D,
                                           double eps, int64_t b, int64_t e) {
  const fn::LayerNormY f;
  for (int64_t r = b; r < e; ++r) {
    const T* in = px + r * D;
    const double m = run_sum(in, D) / double(D);
    const double inv = 1 / std::sqrt(run_sq(in, D, m) / double(D) + eps);
    pm[r] = T(m);
    pi[r] = T(inv);
    const T tm = T(m), ti = T(inv);
    T* out = py + r * D;
    for (int64_t s = 0; s < D; ++s) out[s] = f(in[s], tm, ti, pw[s], pb[s]);
  }
}

// Layer norm's backward for one row: the means of g w and g w xhat (mg, mgx), summed
// in double in lanes as the folds above.
template <typename T>
[[gnu::always_inline]] inline void ln_row_means(const T* gr, const T* in, const T* pw, T m, T inv, int64_t D, T& mg,
                                                T& mgx) {
  double a[kLanes] = {}, c[kLanes] = {};
  auto add = [&](int64_t j, int k) [[gnu::always_inline]] {   // element j into lane k
    const T gw = gr[j] * pw[j];
    a[k] += double(gw);
    c[k] += double(gw) * double((in[j] - m) * inv);
  };
  int64_t s = 0;
  for (; s + kLanes <= D; s += kLanes)
    for (int k = 0; k < kLanes; ++k) add(s + k, k);
  for (int k = 0; s + k < D; ++k) add(s + k, k);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int k = 0; k < width; ++k) {
      a[k] += a[k + width];
      c[k] += c[k + width];
    }
  mg = T(a[0] / double(D));
  mgx = T(c[0] / double(D));
}

// Layer norm's backward for NB rows from r: per row its means, then fn::LayerNormDx;
// with kParams, g xhat and g of the NB rows summed and added to acc's two rows of D
// (this thread's part of the weight's and the bias's gradients) once.
template <int NB, bool kParams, typename T>
[[gnu::always_inline]] inline void ln_backward_block(const T* pg, const T* px, const T* pm, const T* pi, const T* pw,
                                                     T* pdx, double* acc, int64_t D, int64_t r) {
  const fn::LayerNormDx f;
  const T* in[NB];
  const T* gr[NB];
  T* out[NB];
  T m[NB], inv[NB], mg[NB], mgx[NB];
  for (int i = 0; i < NB; ++i) {
    in[i] = px + (r + i) * D;
    gr[i] = pg + (r + i) * D;
    out[i] = pdx + (r + i) * D;
    m[i] = pm[r + i];
    inv[i] = pi[r + i];
    ln_row_means(gr[i], in[i], pw, m[i], inv[i], D, mg[i], mgx[i]);
  }
  // dx, and the parameters' shares, in one pass over g and x. (dx is a result of its
  // own: no store here reaches what the loop reads.)
#pragma GCC ivdep
  for (int64_t k = 0; k < D; ++k) {
    double sw = 0, sb = 0;
    for (int i = 0; i < NB; ++i) {
      const T g = gr[i][k], xhat = (in[i][k] - m[i]) * inv[i];
      out[i][k] = f(g * pw[k], xhat, inv[i], mg[i], mgx[i]);
      if constexpr (kParams) {
        sw += double(g * xhat);
        sb += double(g);
      }
    }
    if constexpr (kParams) {
      acc[k] += sw;
      acc[D + k] += sb;
    }
  }
}

// Layer norm's rows [b, e) backward; where acc is not null, kRowBlock rows at a time, so
// that a block's sums are added to acc once, not once a row (docs/performance.md,
// "Sequence models: layer_norm, LSTM, attention").
constexpr int kRowBlock = 4;

template <typename T>
[[gnu::always_inline]] inline void ln_backward_rows(const T* pg, const T* px, const T* pm, const T* pi, const T* pw,
                                                    T* pdx, double* acc, int64_t D, int64_t b, int64_t e) {
  int64_t r = b;
  if (acc) {
    for (; r + kRowBlock <= e; r += kRowBlock) ln_backward_block<kRowBlock, true>(pg, px, pm, pi, pw, pdx, acc, D, r);
    for (; r < e; ++r) ln_backward_block<1, true>(pg, px, pm, pi, pw, pdx, acc, D, r);
  } else {
    for (; r < e; ++r) ln_backward_block<1, false>(pg, px, pm, pi, pw, pdx, acc, D, r);
  }
}

// The layer-norm loops, built per instruction set (an overload per dtype: target_clones
// takes no templates).
#define DL_NORM_ROWS(T)                                                                                      \
  DL_TARGET_CLONES void ln_rows_of(const T* px, const T* pw, const T* pb, T* py, T* pm, T* pi, int64_t D,     \
                                   double eps, int64_t b, int64_t e) {                                       \
    ln_rows(px, pw, pb, py, pm, pi, D, eps, b, e);                                                           \
  }                                                                                                          \
  DL_TARGET_CLONES void ln_backward_rows_of(const T* pg, const T* px, const T* pm, const T* pi, const T* pw,  \
                                            T* pdx, double* acc, int64_t D, int64_t b, int64_t e) {          \
    ln_backward_rows(pg, px, pm, pi, pw, pdx, acc, D, b, e);                                                 \
  }
DL_NORM_ROWS(float)
DL_NORM_ROWS(double)
#undef DL_NORM_ROWS

template <typename T>
void stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const T* px = x.data<T>();
  T* pm = mean.data<T>();
  T* pv = var.data<T>();
  parallel_units(C, 2 * N * C * S, [&](int64_t b, int64_t e, int) { stats_channels(px, pm, pv, N, C, S, b, e); });
}

template <typename T>
void affine(const Tensor& out, const Tensor& x, const Tensor& scale, const Tensor& shift) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const T* px = x.data<T>();
  const T* pa = scale.data<T>();
  const T* pb = shift.data<T>();
  T* py = out.data<T>();
  parallel_units(N * C, N * C * S, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const T a = pa[r % C], sh = pb[r % C];
      const T* in = px + r * S;
      T* o = py + r * S;
      for (int64_t s = 0; s < S; ++s) o[s] = in[s] * a + sh;
    }
  });
}

template <typename T>
void ln_forward(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  const int64_t R = x.size(0), D = x.size(1);
  const T *px = x.data<T>(), *pw = weight.data<T>(), *pb = bias.data<T>();
  T *py = y.data<T>(), *pm = mean.data<T>(), *pi = invstd.data<T>();
  parallel_units(R, 4 * R * D, [&](int64_t b, int64_t e, int) { ln_rows_of(px, pw, pb, py, pm, pi, D, eps, b, e); });
}

// The weight's and bias's gradients are column sums over the rows: each thread adds
// its rows into its own part (double), and the parts are summed in thread order.
template <typename T>
void ln_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& g, const Tensor& x,
                 const Tensor& mean, const Tensor& invstd, const Tensor& weight) {
  const int64_t R = x.size(0), D = x.size(1);
  const T *pg = g.data<T>(), *px = x.data<T>(), *pm = mean.data<T>(), *pi = invstd.data<T>(), *pw = weight.data<T>();
  T* pdx = dx.data<T>();
  const bool params = dweight.defined() || dbias.defined();
  const int parts = params ? max_threads() : 0;
  std::vector<double> acc(size_t(parts) * 2 * size_t(D), 0.0);
  parallel_units(R, 6 * R * D, [&](int64_t b, int64_t e, int t) {
    ln_backward_rows_of(pg, px, pm, pi, pw, pdx, params ? acc.data() + size_t(t) * 2 * size_t(D) : nullptr, D, b, e);
  });
  if (!params) return;
  T* pdw = dweight.defined() ? dweight.data<T>() : nullptr;
  T* pdb = dbias.defined() ? dbias.data<T>() : nullptr;
  for (int64_t k = 0; k < D; ++k) {
    double w = 0, bsum = 0;
    for (int t = 0; t < parts; ++t) {
      w += acc[size_t(t) * 2 * size_t(D) + size_t(k)];
      bsum += acc[size_t(t) * 2 * size_t(D) + size_t(D + k)];
    }
    if (pdw) pdw[k] = T(w);
    if (pdb) pdb[k] = T(bsum);
  }
}

}  // namespace

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  DL_DISPATCH_FLOAT(x.dtype(), "layer_norm", ln_forward<scalar_t>(y, mean, invstd, x, weight, bias, eps));
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& g,
                         const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight) {
  DL_DISPATCH_FLOAT(x.dtype(), "layer_norm", ln_backward<scalar_t>(dx, dweight, dbias, g, x, mean, invstd, weight));
}

void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  DL_DISPATCH_FLOAT(x.dtype(), "batch_norm", stats<scalar_t>(mean, var, x));
}

void channel_affine(const Tensor& out, const Tensor& x, const Tensor& scale, const Tensor& shift) {
  DL_DISPATCH_FLOAT(x.dtype(), "batch_norm", affine<scalar_t>(out, x, scale, shift));
}

}  // namespace dl::cpu
