// CPU kernels of batch normalisation: per-channel statistics and the per-channel
// affine map that applies them. Contracts in tensor/backend.h ("neural networks").
//
// x is (N, C, S): channel c is N runs of S contiguous elements. Statistics are
// accumulated in double whatever the dtype, mean first and then squared deviations
// from it (two passes: the one-pass E[x^2] - E[x]^2 cancels catastrophically for
// data far from zero). Threads split the channels for the statistics and the (n, c)
// rows for the affine map.
#include "tensor/cpu/nn_kernels.h"

namespace dl::cpu {

namespace {

template <typename T>
void stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const T* px = x.data<T>();
  T* pm = mean.data<T>();
  T* pv = var.data<T>();
  const double count = double(N) * double(S);
  parallel_units(C, 2 * N * C * S, [&](int64_t b, int64_t e, int) {
    for (int64_t c = b; c < e; ++c) {
      double sum = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* row = px + (n * C + c) * S;
        for (int64_t s = 0; s < S; ++s) sum += double(row[s]);
      }
      const double m = sum / count;
      double sq = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* row = px + (n * C + c) * S;
        for (int64_t s = 0; s < S; ++s) {
          const double d = double(row[s]) - m;
          sq += d * d;
        }
      }
      pm[c] = T(m);
      pv[c] = T(sq / count);
    }
  });
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

}  // namespace

void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  DL_DISPATCH_FLOAT(x.dtype(), "batch_norm", stats<scalar_t>(mean, var, x));
}

void channel_affine(const Tensor& out, const Tensor& x, const Tensor& scale, const Tensor& shift) {
  DL_DISPATCH_FLOAT(x.dtype(), "batch_norm", affine<scalar_t>(out, x, scale, shift));
}

}  // namespace dl::cpu
