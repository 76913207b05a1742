// The CPU's fft_c2c (tensor/kernels.def): Note [The CPU's transform] in tensor/fft.h.
#include <cstdint>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/fft.h"

namespace dl::cpu {

namespace {

using fft::Complex;

// The transform of a length whose prime factors are all at most kMaxRadix, by mixed-radix
// Cooley-Tukey in decimation in time: a transform of len = p m is p transforms of m (of the
// elements r, r + p, r + 2p ...), then for each k < m the p outputs k + q m from the p
// values at k, twiddled (radix 4 and 2 as butterflies, others as a small sum). tw holds
// e^(-+2 pi i j / n) for j < n: a sub-length's twiddles are every (n / len)-th of them.
constexpr int kMaxRadix = 31;
struct Mixed {
  int64_t n = 1;
  bool inverse = false;
  std::vector<int> radices;
  std::vector<Complex> tw;

  // The radices of n (4s first), or none when a prime factor is above kMaxRadix.
  static std::vector<int> radices_of(int64_t n) {
    std::vector<int> r;
    while (n % 4 == 0) { r.push_back(4); n /= 4; }
    if (n % 2 == 0) { r.push_back(2); n /= 2; }
    for (int p = 3; p <= kMaxRadix && n > 1; p += 2)
      while (n % p == 0) { r.push_back(p); n /= p; }
    if (n > 1) r.clear();
    return r;
  }

  Mixed() = default;
  Mixed(int64_t n_, bool inverse_) : n(n_), inverse(inverse_), radices(radices_of(n_)), tw(size_t(n_)) {
    for (int64_t j = 0; j < n; ++j) tw[size_t(j)] = fft::twiddle(j, n, inverse);
  }

  void run(const Complex* in, int64_t stride, Complex* out, int64_t len, size_t level) const {
    if (len == 1) {
      out[0] = in[0];
      return;
    }
    const int p = radices[level];
    const int64_t m = len / p, scale = n / len;
    // (the last stage's sub-transforms are single values: read in place, no calls)
    if (m > 1)
      for (int r = 0; r < p; ++r) run(in + r * stride, stride * p, out + r * m, m, level + 1);
    Complex t[kMaxRadix + 1], y[kMaxRadix + 1];
    for (int64_t k = 0; k < m; ++k) {
      if (m == 1) {
        for (int r = 0; r < p; ++r) t[r] = in[r * stride];
      } else {
        t[0] = out[k];
        if (k == 0) {
          for (int r = 1; r < p; ++r) t[r] = out[r * m];   // (twiddles of 1)
        } else {
          for (int r = 1; r < p; ++r) t[r] = fft::mul(out[r * m + k], tw[size_t(r * k * scale)]);
        }
      }
      if (p == 2) {
        y[0] = {t[0].re + t[1].re, t[0].im + t[1].im};
        y[1] = {t[0].re - t[1].re, t[0].im - t[1].im};
      } else if (p == 4) {
        const Complex a{t[0].re + t[2].re, t[0].im + t[2].im}, b{t[0].re - t[2].re, t[0].im - t[2].im};
        const Complex c{t[1].re + t[3].re, t[1].im + t[3].im}, e{t[1].re - t[3].re, t[1].im - t[3].im};
        // d = e times -i (forward) or +i (inverse): w_4
        const Complex d = inverse ? Complex{-e.im, e.re} : Complex{e.im, -e.re};
        y[0] = {a.re + c.re, a.im + c.im};
        y[1] = {b.re + d.re, b.im + d.im};
        y[2] = {a.re - c.re, a.im - c.im};
        y[3] = {b.re - d.re, b.im - d.im};
      } else {
        for (int q = 0; q < p; ++q) {
          Complex acc = t[0];
          for (int r = 1; r < p; ++r) {
            const Complex w = tw[size_t((r * q % p) * m * scale)];   // w_p^(r q)
            const Complex v = fft::mul(t[r], w);
            acc.re += v.re;
            acc.im += v.im;
          }
          y[q] = acc;
        }
      }
      for (int q = 0; q < p; ++q) out[k + q * m] = y[q];
    }
  }
  // out = the transform of in (n values each).
  void operator()(const Complex* in, Complex* out) const { run(in, 1, out, n, 0); }
};

// What one length n needs, made once per call: the mixed-radix transform of n, or, when a
// prime factor of n is above kMaxRadix, Bluestein's chirp, the transform of its conjugate
// kernel and the two transforms of the power of two m >= 2n - 1 between.
struct Plan {
  int64_t n, m;
  bool inverse, bluestein;
  Mixed direct, forward_m, inverse_m;
  std::vector<Complex> chirp, kernel;

  Plan(int64_t n_, bool inverse_) : n(n_), m(n_), inverse(inverse_), bluestein(Mixed::radices_of(n_).empty() && n_ > 1) {
    if (!bluestein) {
      direct = Mixed(n, inverse);
      return;
    }
    m = 1;
    while (m < 2 * n - 1) m <<= 1;
    forward_m = Mixed(m, false);
    inverse_m = Mixed(m, true);
    // chirp_k = e^(-+i pi k^2 / n); k^2 reduced mod 2n (in unsigned arithmetic: k^2 of a
    // length near 2^32 passes int64's range)
    chirp.resize(size_t(n));
    for (int64_t k = 0; k < n; ++k) {
      const uint64_t kk = uint64_t(k) % uint64_t(2 * n);
      const int64_t sq = int64_t((kk * kk) % uint64_t(2 * n));
      chirp[size_t(k)] = fft::half_turns(sq, n, inverse);
    }
    std::vector<Complex> b(size_t(m), Complex{0, 0});
    for (int64_t k = 0; k < n; ++k) {
      const Complex c{chirp[size_t(k)].re, -chirp[size_t(k)].im};
      b[size_t(k)] = c;
      if (k > 0) b[size_t(m - k)] = c;
    }
    kernel.resize(size_t(m));
    forward_m(b.data(), kernel.data());
  }

  // The scratch one row needs: n values in and out, and the chirp's two of m.
  int64_t scratch_size() const { return bluestein ? 2 * m : 2 * n; }

  // One row: in and out are n (re, im) pairs.
  template <typename T>
  void run(const T* in, T* out, std::vector<Complex>& scratch) const {
    Complex* a = scratch.data();
    Complex* b = a + (bluestein ? m : n);
    if (!bluestein) {
      for (int64_t j = 0; j < n; ++j) a[j] = {double(in[2 * j]), double(in[2 * j + 1])};
      direct(a, b);
      for (int64_t k = 0; k < n; ++k) {
        out[2 * k] = T(b[k].re);
        out[2 * k + 1] = T(b[k].im);
      }
      return;
    }
    for (int64_t j = 0; j < n; ++j) a[j] = fft::mul({double(in[2 * j]), double(in[2 * j + 1])}, chirp[size_t(j)]);
    for (int64_t j = n; j < m; ++j) a[j] = {0, 0};
    forward_m(a, b);
    for (int64_t j = 0; j < m; ++j) b[j] = fft::mul(b[j], kernel[size_t(j)]);
    inverse_m(b, a);
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
  std::vector<std::vector<Complex>> scratch(size_t(threaded ? max_threads() : 1),
                                            std::vector<Complex>(size_t(plan.scratch_size())));
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
