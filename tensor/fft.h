// The discrete Fourier transform's math, shared by the CPU and CUDA kernels of fft_c2c
// (tensor/kernels.def).
//
// Note [Complex values as pairs]
// dlua has no complex dtype: a complex tensor is a real one whose last dim holds (real,
// imaginary), PyTorch's view_as_real layout, so that every op, the gradient, dl.compile,
// devices and files work on it unchanged. fft_c2c(x, inverse) transforms x (..., n, 2)
// along dim -2: X_k = sum_j x_j e^(-+2 pi i jk / n), unnormalised in both directions (the
// Lua module dl.fft scales and reshapes, scripts/dlua/fft.lua). It is linear, and its
// adjoint is the transform of the other sign, which is its derivative.
//
// Note [The CPU's transform]
// In double for every dtype. A length whose prime factors are all at most 31 runs a
// mixed-radix Cooley-Tukey (radix 2, 3, 4 and 5 as butterflies, 7, 11 ... as small sums); any
// other length n runs Bluestein's chirp, jk = (j^2 + k^2 - (k - j)^2) / 2, as a circular
// convolution of length m >= 2n - 1, a power of two, through three transforms of m. Twiddles come from twiddle() below with their exponent reduced
// exactly (jk mod n, and k^2 mod 2n for the chirp), so no angle grows with n. CUDA sums
// each output of a row of at most 16 values directly (n^2 work) with the same twiddle(),
// and runs cuFFT for longer rows (gpu/fft.cu).
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define DL_FFT_HD __host__ __device__ inline
#else
#define DL_FFT_HD inline
#endif

namespace dl::fft {

struct Complex {
  double re, im;
};

DL_FFT_HD Complex mul(Complex a, Complex b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }

// e^(-+i pi num / den) (- for the forward transform), num in [0, 2 den): exact at the
// quarter turns, and no argument larger than 2 pi.
DL_FFT_HD Complex half_turns(int64_t num, int64_t den, bool inverse) {
  const double t = double(num) / double(den);   // in [0, 2)
  double s, c;
#ifdef __CUDA_ARCH__
  sincospi(t, &s, &c);
#else
  if (num * 2 % den == 0) {   // 0, 1/2, 1, 3/2 half turns: exact
    const int64_t q = num * 2 / den;   // 0..3
    c = q == 0 ? 1 : q == 2 ? -1 : 0;
    s = q == 1 ? 1 : q == 3 ? -1 : 0;
  } else {
    s = std::sin(3.14159265358979323846 * t);
    c = std::cos(3.14159265358979323846 * t);
  }
#endif
  return {c, inverse ? s : -s};
}

// e^(-+2 pi i k / n) for any k >= 0.
DL_FFT_HD Complex twiddle(int64_t k, int64_t n, bool inverse) { return half_turns(2 * (k % n), n, inverse); }

}  // namespace dl::fft
