// The CUDA fft_c2c, fft_r2c and fft_c2r (tensor/kernels.def): each output of each row
// summed directly over the row, n^2 work, with the CPU's twiddles (tensor/fft.h, Note [The
// CPU's transform]; the weights of Note [A real signal's transform] in tensor/cpu/fft.cpp);
// in double for both dtypes, as the CPU's.
#include "gpu/common.h"
#include "gpu/loops.cuh"
#include "tensor/fft.h"

namespace dl::gpu {

namespace {

// sum_j x_j w^(+-jk) over a row of n complex pairs, or of n reals when `real`
template <typename T>
__device__ fft::Complex bin_sum(const T* in, int64_t n, int64_t k, bool inverse, bool real) {
  double re = 0, im = 0;
  int64_t jk = 0;   // j k mod n, stepped without a product that could overflow
  for (int64_t j = 0; j < n; ++j) {
    const fft::Complex w = fft::twiddle(jk, n, inverse);
    const double a = double(in[real ? j : 2 * j]), b = real ? 0.0 : double(in[2 * j + 1]);
    re += a * w.re - b * w.im;
    im += a * w.im + b * w.re;
    jk += k;
    if (jk >= n) jk -= n;
  }
  return {re, im};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
dft_rows(const T* x, T* out, int64_t rows, int64_t n, bool inverse) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * n; t += stride) {
    const fft::Complex c = bin_sum(x + (t / n) * 2 * n, n, t % n, inverse, false);
    out[2 * t] = T(c.re);
    out[2 * t + 1] = T(c.im);
  }
}

// bin k of a real row, the bins strictly between 0 and n/2 times weight
template <typename T>
__global__ void __launch_bounds__(kThreads)
r2c_rows(const T* x, T* out, int64_t rows, int64_t n, double weight) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * bins; t += stride) {
    const int64_t k = t % bins;
    const fft::Complex c = bin_sum(x + (t / bins) * n, n, k, false, true);
    const bool edge = k == 0 || 2 * k == n;
    out[2 * t] = T(edge ? c.re : weight * c.re);
    out[2 * t + 1] = T(edge ? 0.0 : weight * c.im);
  }
}

// value j of the real signal of a row of bins: Re y_0 + weight sum_(0<k<n/2) Re(y_k w^-jk)
// + Re y_(n/2) (-1)^j
template <typename T>
__global__ void __launch_bounds__(kThreads)
c2r_rows(const T* y, T* out, int64_t rows, int64_t n, double weight) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * n; t += stride) {
    const int64_t r = t / n, j = t % n;
    const T* in = y + r * 2 * bins;
    double v = double(in[0]);
    int64_t jk = 0;
    for (int64_t k = 1; k < bins; ++k) {
      jk += j;
      if (jk >= n) jk -= n;
      const fft::Complex w = fft::twiddle(jk, n, true);
      const double term = double(in[2 * k]) * w.re - double(in[2 * k + 1]) * w.im;
      v += 2 * k == n ? double(in[2 * k]) * w.re : weight * term;
    }
    out[t] = T(v);
  }
}

}  // namespace

void fft_r2c(const Tensor& out, const Tensor& x, int64_t weight) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 1 && (weight == 1 || weight == 2));
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / n;
  const DeviceContext& c = activate(x, "rfft");
  DL_DISPATCH_FLOAT(x.dtype(), "rfft", {
    r2c_rows<scalar_t><<<grid_for(rows * (n / 2 + 1), c), kThreads, 0, c.stream>>>(
        x.data<scalar_t>(), out.data<scalar_t>(), rows, n, double(weight));
  });
  check_launch("rfft");
}

void fft_c2r(const Tensor& out, const Tensor& y, int64_t weight) {
  DL_ASSERT(y.is_contiguous() && out.is_contiguous() && y.dim() >= 2 && (weight == 1 || weight == 2));
  if (out.numel() == 0) return;
  const int64_t n = out.size(out.dim() - 1), rows = out.numel() / n;
  const DeviceContext& c = activate(y, "irfft");
  DL_DISPATCH_FLOAT(y.dtype(), "irfft", {
    c2r_rows<scalar_t><<<grid_for(rows * n, c), kThreads, 0, c.stream>>>(y.data<scalar_t>(), out.data<scalar_t>(),
                                                                         rows, n, double(weight));
  });
  check_launch("irfft");
}

void fft_c2c(const Tensor& out, const Tensor& x, bool inverse) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 2 && x.size(x.dim() - 1) == 2);
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 2), rows = x.numel() / (2 * n);
  const DeviceContext& c = activate(x, "fft");
  DL_DISPATCH_FLOAT(x.dtype(), "fft", {
    dft_rows<scalar_t><<<grid_for(rows * n, c), kThreads, 0, c.stream>>>(x.data<scalar_t>(), out.data<scalar_t>(),
                                                                          rows, n, inverse);
  });
  check_launch("fft");
}

}  // namespace dl::gpu
