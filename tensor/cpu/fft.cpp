// The CPU's fft_c2c (tensor/kernels.def): Note [The CPU's transform] in tensor/fft.h.
#include <cstdint>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/fft.h"

namespace dl::cpu {

namespace {

using fft::Complex;

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The transform of length m (a power of two) of a, in place: bit reversal, then the
// butterflies of each stage with the twiddles w[k] = e^(-+2 pi i k / m), k < m / 2.
void radix2(Complex* a, int64_t m, const std::vector<Complex>& w) {
  for (int64_t i = 1, j = 0; i < m; ++i) {
    int64_t bit = m >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (int64_t len = 2; len <= m; len <<= 1) {
    const int64_t half = len / 2, step = m / len;
    for (int64_t s = 0; s < m; s += len) {
      for (int64_t k = 0; k < half; ++k) {
        const Complex t = fft::mul(a[s + k + half], w[size_t(k * step)]);
        const Complex u = a[s + k];
        a[s + k] = {u.re + t.re, u.im + t.im};
        a[s + k + half] = {u.re - t.re, u.im - t.im};
      }
    }
  }
}

std::vector<Complex> twiddles(int64_t m, bool inverse) {
  std::vector<Complex> w(size_t(m / 2 > 0 ? m / 2 : 1));
  for (int64_t k = 0; k < m / 2; ++k) w[size_t(k)] = fft::twiddle(k, m, inverse);
  return w;
}

// What one length n needs, made once per call: radix-2's twiddles, or Bluestein's chirp
// and the transform of its conjugate kernel.
struct Plan {
  int64_t n, m;
  bool inverse, bluestein;
  std::vector<Complex> w, w_inv, chirp, kernel;

  Plan(int64_t n_, bool inverse_) : n(n_), m(n_), inverse(inverse_), bluestein(!power_of_two(n_)) {
    if (!bluestein) {
      w = twiddles(n, inverse);
      return;
    }
    m = 1;
    while (m < 2 * n - 1) m <<= 1;
    w = twiddles(m, false);
    w_inv = twiddles(m, true);
    // chirp_k = e^(-+i pi k^2 / n); k^2 reduced mod 2n (in unsigned arithmetic: k^2 of a
    // length near 2^32 passes int64's range)
    chirp.resize(size_t(n));
    for (int64_t k = 0; k < n; ++k) {
      const uint64_t kk = uint64_t(k) % uint64_t(2 * n);
      const int64_t sq = int64_t((kk * kk) % uint64_t(2 * n));
      chirp[size_t(k)] = fft::half_turns(sq, n, inverse);
    }
    kernel.assign(size_t(m), Complex{0, 0});
    for (int64_t k = 0; k < n; ++k) {
      const Complex c{chirp[size_t(k)].re, -chirp[size_t(k)].im};
      kernel[size_t(k)] = c;
      if (k > 0) kernel[size_t(m - k)] = c;
    }
    radix2(kernel.data(), m, w);
  }

  // One row: in and out are n (re, im) pairs; scratch holds m values.
  template <typename T>
  void run(const T* in, T* out, std::vector<Complex>& scratch) const {
    Complex* a = scratch.data();
    if (!bluestein) {
      for (int64_t j = 0; j < n; ++j) a[j] = {double(in[2 * j]), double(in[2 * j + 1])};
      radix2(a, n, w);
      for (int64_t k = 0; k < n; ++k) {
        out[2 * k] = T(a[k].re);
        out[2 * k + 1] = T(a[k].im);
      }
      return;
    }
    for (int64_t j = 0; j < n; ++j) a[j] = fft::mul({double(in[2 * j]), double(in[2 * j + 1])}, chirp[size_t(j)]);
    for (int64_t j = n; j < m; ++j) a[j] = {0, 0};
    radix2(a, m, w);
    for (int64_t j = 0; j < m; ++j) a[j] = fft::mul(a[j], kernel[size_t(j)]);
    radix2(a, m, w_inv);
    const double scale = 1.0 / double(m);
    for (int64_t k = 0; k < n; ++k) {
      const Complex c = fft::mul({a[k].re * scale, a[k].im * scale}, chirp[size_t(k)]);
      out[2 * k] = T(c.re);
      out[2 * k + 1] = T(c.im);
    }
  }
};

template <typename T>
void fft_typed(const Tensor& out, const Tensor& x, bool inverse) {
  const int64_t n = x.size(x.dim() - 2), rows = x.numel() / (2 * n);
  const Plan plan(n, inverse);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  // (Nothing inside may throw: each thread's scratch is allocated before, and one only
  // where the rows run on one thread, as a single long transform does.)
  const double work = double(rows) * double(plan.m) * 8;
  const bool threaded = rows >= 2 && work >= double(kParallelGrain);
  std::vector<std::vector<Complex>> scratch(size_t(threaded ? max_threads() : 1), std::vector<Complex>(size_t(plan.m)));
  parallel_units(rows, threaded ? work : 0, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t r = begin; r < end; ++r) plan.run(xp + r * 2 * n, op + r * 2 * n, scratch[size_t(thread)]);
  });
}

}  // namespace

void fft_c2c(const Tensor& out, const Tensor& x, bool inverse) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 2 && x.size(x.dim() - 1) == 2);
  if (x.numel() == 0) return;
  DL_DISPATCH_FLOAT(x.dtype(), "fft", (fft_typed<scalar_t>(out, x, inverse)));
}

}  // namespace dl::cpu
