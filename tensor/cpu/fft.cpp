// The CPU's fft_c2c, fft_r2c and fft_c2r (tensor/kernels.def): Note [The CPU's transform]
// in tensor/fft.h, Notes [Rows transformed together] and [A real signal's transform]
// below.
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/vec.h"
#include "tensor/fft.h"

namespace dl::cpu {

namespace {

using fft::Complex;

// Note [Rows transformed together]
// The transforms are written once for `Z`, which is either one complex value (Complex) or
// a Pack: the values of several rows at one position, a vector of real parts and one of
// imaginary parts, so that each instruction works on as many rows as the vector holds
// (pocketfft's way to vectorise a batch). A batch runs as packs of vector_bytes() / 8 rows,
// built for each vector width (Note [Builds for each vector width] in loops.h), the last
// pack filled with zero rows; a single row, or one too long for a pack's room, runs alone.
// Each lane does the scalar arithmetic in the scalar order (no fused multiply-adds), so a
// row's values are the same bits in a pack of any width or alone.
// (aligned by hand: GCC gives a vector typedef of a template the alignment of 16 bytes,
// and a wider one read from an array of packs must not straddle it)
template <int VB>
struct alignas(VB) Pack {
  typename Vec<double, VB>::V re, im;
};

template <typename Z>
struct Lanes;
template <>
struct Lanes<Complex> {
  static constexpr int kCount = 1;
  [[gnu::always_inline]] static void set(Complex& z, int, double re, double im) { z = {re, im}; }
  [[gnu::always_inline]] static Complex get(const Complex& z, int) { return z; }
};
template <int VB>
struct Lanes<Pack<VB>> {
  static constexpr int kCount = VB / int(sizeof(double));
  [[gnu::always_inline]] static void set(Pack<VB>& z, int l, double re, double im) {
    z.re[l] = re;
    z.im[l] = im;
  }
  [[gnu::always_inline]] static Complex get(const Pack<VB>& z, int l) { return {z.re[l], z.im[l]}; }
};

#define DL_FFT_INLINE [[gnu::always_inline]] inline
template <typename Z>
DL_FFT_INLINE Z add(Z a, Z b) { return {a.re + b.re, a.im + b.im}; }
template <typename Z>
DL_FFT_INLINE Z sub(Z a, Z b) { return {a.re - b.re, a.im - b.im}; }
// a w for one w in every lane
template <typename Z>
DL_FFT_INLINE Z mul(Z a, Complex w) { return {a.re * w.re - a.im * w.im, a.re * w.im + a.im * w.re}; }
template <typename Z>
DL_FFT_INLINE Z scaled(Z a, double c) { return {a.re * c, a.im * c}; }
// i s a
template <typename Z>
DL_FFT_INLINE Z turned(Z a, double s) { return {-(a.im * s), a.re * s}; }
template <typename Z>
DL_FFT_INLINE Z conj(Z a) { return {a.re, -a.im}; }

// The tables of a transform of a length whose prime factors are all at most kMaxRadix:
// its radices (4s first) and tw, e^(-+2 pi i j / n) for j < n.
constexpr int kMaxRadix = 31;
struct Mixed {
  int64_t n = 1;
  std::vector<int> radices;
  std::vector<Complex> tw;

  // The radices of n, or none when a prime factor is above kMaxRadix.
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
  Mixed(int64_t n_, bool inverse) : n(n_), radices(radices_of(n_)), tw(size_t(n_)) {
    for (int64_t j = 0; j < n; ++j) tw[size_t(j)] = fft::twiddle(j, n, inverse);
  }
};

// y = the transform of length p of t (y_q = sum_r t_r w_p^(rq)): radix P = 2, 3, 4 and 5
// as butterflies, the others (P = 0) as a sum. w_p^j is tw[j n / p].
template <int P, typename Z>
DL_FFT_INLINE void butterfly(const Mixed& plan, int p, const Z* t, Z* y) {
  const Complex* tw = plan.tw.data();
  const int64_t n = plan.n;
  if constexpr (P == 2) {
    y[0] = add(t[0], t[1]);
    y[1] = sub(t[0], t[1]);
  } else if constexpr (P == 4) {
    // w_4 = -+i: y_1, y_3 = (t0 - t2) +- w_4 (t1 - t3)
    const Z a = add(t[0], t[2]), b = sub(t[0], t[2]), c = add(t[1], t[3]);
    const Z d = turned(sub(t[1], t[3]), tw[n / 4].im);
    y[0] = add(a, c);
    y[1] = add(b, d);
    y[2] = sub(a, c);
    y[3] = sub(b, d);
  } else if constexpr (P == 3) {
    // w = e^(-+2 pi i / 3) = c + i s: y_1, y_2 = t0 + c (t1 + t2) +- i s (t1 - t2)
    const Complex w = tw[n / 3];
    const Z a = add(t[1], t[2]);
    const Z mid = add(t[0], scaled(a, w.re)), rot = turned(sub(t[1], t[2]), w.im);
    y[0] = add(t[0], a);
    y[1] = add(mid, rot);
    y[2] = sub(mid, rot);
  } else if constexpr (P == 5) {
    // w^1 = c1 + i s1, w^2 = c2 + i s2 (w^4, w^3 their conjugates), so with a_r, b_r =
    // t_r +- t_(5-r): y_1, y_4 = t0 + c1 a1 + c2 a2 +- i (s1 b1 + s2 b2) and y_2, y_3 =
    // t0 + c2 a1 + c1 a2 +- i (s2 b1 - s1 b2)
    const Complex w1 = tw[n / 5], w2 = tw[2 * n / 5];
    const Z a1 = add(t[1], t[4]), b1 = sub(t[1], t[4]), a2 = add(t[2], t[3]), b2 = sub(t[2], t[3]);
    const Z m1 = add(add(t[0], scaled(a1, w1.re)), scaled(a2, w2.re));
    const Z m2 = add(add(t[0], scaled(a1, w2.re)), scaled(a2, w1.re));
    const Z r1 = add(turned(b1, w1.im), turned(b2, w2.im));
    const Z r2 = sub(turned(b1, w2.im), turned(b2, w1.im));
    y[0] = add(add(t[0], a1), a2);
    y[1] = add(m1, r1);
    y[4] = sub(m1, r1);
    y[2] = add(m2, r2);
    y[3] = sub(m2, r2);
  } else {
    const int64_t step = n / p;
    for (int q = 0; q < p; ++q) {
      Z acc = t[0];
      for (int r = 1; r < p; ++r) acc = add(acc, mul(t[r], tw[(r * q % p) * step]));
      y[q] = acc;
    }
  }
}

// out = the transform of in (n values; work: n more; the three distinct), by Stockham's
// self-sorting decimation in frequency. After s stages the data are l = p_0 .. p_(s-1)
// transforms of m = n / l values, value j of transform q at j l + q. A stage of radix p
// splits each: with j = j1 + (m / p) j2, transform q's values j1 + (m / p) j2 go through a
// butterfly of p, output k2 twiddled by w_m^(j1 k2) (tw[j1 k2 l]), and become value j1 of
// transform q + l k2. The last stage leaves X_k at k, in order; the stages alternate
// between out and work so that it ends in out.
template <int P, typename Z>
DL_FFT_INLINE void stage(const Mixed& plan, int p, const Z* src, Z* dst, int64_t l, int64_t mp) {
  constexpr int kRoom = P == 0 ? kMaxRadix : P;
  const Complex* tw = plan.tw.data();
  for (int64_t j1 = 0; j1 < mp; ++j1) {
    Complex w[kRoom];
    for (int k2 = 1; k2 < p; ++k2) w[k2] = tw[j1 * k2 * l];
    for (int64_t q = 0; q < l; ++q) {
      Z t[kRoom], y[kRoom] = {};   // (zeroed for GCC, which cannot see the butterfly write each)
      for (int j2 = 0; j2 < p; ++j2) t[j2] = src[(j1 + mp * j2) * l + q];
      butterfly<P>(plan, p, t, y);
      Z* o = dst + j1 * l * p + q;
      o[0] = y[0];
      if (j1 == 0) {
        for (int k2 = 1; k2 < p; ++k2) o[k2 * l] = y[k2];   // (twiddles of 1)
      } else {
        for (int k2 = 1; k2 < p; ++k2) o[k2 * l] = mul(y[k2], w[k2]);
      }
    }
  }
}

template <typename Z>
DL_FFT_INLINE void mixed_transform(const Mixed& plan, const Z* in, Z* out, Z* work) {
  const int stages = int(plan.radices.size());
  if (stages == 0) {
    out[0] = in[0];
    return;
  }
  const Z* src = in;
  int64_t l = 1, m = plan.n;
  for (int s = 0; s < stages; ++s) {
    const int p = plan.radices[size_t(s)];
    const int64_t mp = m / p;
    Z* dst = (stages - 1 - s) % 2 == 0 ? out : work;
    switch (p) {
      case 2: stage<2>(plan, p, src, dst, l, mp); break;
      case 3: stage<3>(plan, p, src, dst, l, mp); break;
      case 4: stage<4>(plan, p, src, dst, l, mp); break;
      case 5: stage<5>(plan, p, src, dst, l, mp); break;
      default: stage<0>(plan, p, src, dst, l, mp); break;
    }
    src = dst;
    l *= p;
    m = mp;
  }
}

// What one length n needs (kept between calls: plan_for below): the mixed-radix tables of
// n, or, when a prime factor of n is above kMaxRadix, Bluestein's chirp, the transform of
// its conjugate kernel and the tables of the power of two m >= 2n - 1 between.
struct Plan {
  int64_t n, m;
  bool bluestein;
  Mixed direct, forward_m, inverse_m;
  std::vector<Complex> chirp, kernel;
  std::vector<Complex> real_tw;   // for a real signal of 2n: w^k of its length, k = 0 .. n

  Plan(int64_t n_, bool inverse, bool real) : n(n_), m(n_), bluestein(Mixed::radices_of(n_).empty() && n_ > 1) {
    if (real) {
      real_tw.resize(size_t(n + 1));
      for (int64_t k = 0; k <= n; ++k) real_tw[size_t(k)] = fft::twiddle(k, 2 * n, false);
    }
    if (!bluestein) {
      direct = Mixed(n, inverse);
      return;
    }
    m = 1;
    while (m < 2 * n - 1) m <<= 1;
    forward_m = Mixed(m, false);
    inverse_m = Mixed(m, true);
    // chirp_k = e^(-+i pi k^2 / n), k^2 reduced mod 2n step by step ((k + 1)^2 = k^2 + 2k +
    // 1: no square that could pass int64's range)
    chirp.resize(size_t(n));
    for (int64_t k = 0, sq = 0; k < n; ++k) {
      chirp[size_t(k)] = fft::half_turns(sq, n, inverse);
      sq = (sq + 2 * k + 1) % (2 * n);
    }
    std::vector<Complex> b(static_cast<size_t>(m), Complex{0, 0}), work(static_cast<size_t>(m));
    for (int64_t k = 0; k < n; ++k) {
      const Complex c{chirp[size_t(k)].re, -chirp[size_t(k)].im};
      b[size_t(k)] = c;
      if (k > 0) b[size_t(m - k)] = c;
    }
    kernel.resize(size_t(m));
    mixed_transform(forward_m, b.data(), kernel.data(), work.data());
  }

  // The room transform() needs beside its input and output.
  int64_t work_size() const { return bluestein ? 3 * m : n; }
};

// out = the transform of in, n values each (distinct arrays, neither in `work`).
template <typename Z>
DL_FFT_INLINE void transform(const Plan& plan, const Z* in, Z* out, Z* work) {
  if (!plan.bluestein) return mixed_transform(plan.direct, in, out, work);
  const int64_t n = plan.n, m = plan.m;
  Z* a = work;
  Z* b = work + m;
  for (int64_t j = 0; j < n; ++j) a[j] = mul(in[j], plan.chirp[size_t(j)]);
  for (int64_t j = n; j < m; ++j) a[j] = Z{};
  mixed_transform(plan.forward_m, a, b, work + 2 * m);
  for (int64_t j = 0; j < m; ++j) b[j] = mul(b[j], plan.kernel[size_t(j)]);
  mixed_transform(plan.inverse_m, b, a, work + 2 * m);
  const double scale = 1.0 / double(m);
  for (int64_t k = 0; k < n; ++k) out[k] = mul(scaled(a[k], scale), plan.chirp[size_t(k)]);
}

// Note [A real signal's transform]
// The transform X of a real x (n values) is Hermitian, X_(n-k) = conj(X_k), so its bins 0
// .. n/2 hold it all. For an even n = 2h, the evens and odds of x are the real and
// imaginary parts of one complex signal z_j = x_2j + i x_2j+1, and one transform Z of h
// gives both halves: with E_k = (Z_k + conj Z_(h-k)) / 2 and O_k = (Z_k - conj Z_(h-k)) /
// 2i (the transforms of the evens and of the odds), X_k = E_k + w^k O_k, w = e^(-2 pi i /
// n), k = 0 .. h (Z_h meaning Z_0). The way back runs the same steps in reverse: 2 E_k +
// 2i w^-k O_k from the bins (E and O as above, from X_k and conj X_(h-k)), one unnormalised
// inverse transform of h, its real and imaginary parts the evens and odds. An odd n
// transforms (x, 0) as complex, and back from the whole spectrum with the mirrored bins
// written out. An even n costs about half of a complex transform of n, an odd one all of it.
//
// The bins strictly between 0 and n/2 stand for two bins of the whole spectrum, and the
// two ops carry a weight c for them (1 or 2) so that each is the other's adjoint:
// r2c(x, c)_k = c_k X_k (c_k = 1 at bins 0 and n/2), and c2r(Y, n, c)_j = Re Y_0 + c
// sum_(0<k<n/2) Re(Y_k w^-jk) + Re Y_(n/2) (-1)^j, which reads no imaginary part of bins
// 0 and n/2. rfft is r2c with c = 1, irfft is c2r with c = 2 (n times the inverse of
// rfft), and the derivative of either is the other op with the same weight
// (autograd/spectral.cpp).

// One call's transforms: the kind, the plan of the complex transform each row runs (of n,
// or of n/2 for a real signal of even length), and the operands.
enum class Kind { C2C, R2C, C2R };
struct Job {
  Kind kind;
  const Plan* plan;
  int64_t n;                 // the signal's length (c2c: plan->n)
  int64_t weight;            // r2c, c2r: of the bins strictly between 0 and n/2
  const void* x;
  void* out;

  int64_t len() const { return plan->n; }
  // The values (of Z) one group of rows needs: the complex transform's input and output,
  // the bins of c2r, and the transform's work.
  int64_t room() const { return 2 * len() + (kind == Kind::C2R ? n / 2 + 1 : 0) + plan->work_size(); }
};

template <typename Z, typename T>
DL_FFT_INLINE void c2c_rows(const Job& job, int64_t r0, int count, Z* s) {
  using L = Lanes<Z>;
  const int64_t n = job.n;
  const T* x = static_cast<const T*>(job.x) + r0 * 2 * n;
  T* o = static_cast<T*>(job.out) + r0 * 2 * n;
  Z* in = s;
  Z* y = s + n;
  for (int64_t j = 0; j < n; ++j) {
    Z v{};
    for (int l = 0; l < count; ++l) L::set(v, l, double(x[l * 2 * n + 2 * j]), double(x[l * 2 * n + 2 * j + 1]));
    in[j] = v;
  }
  transform(*job.plan, in, y, s + 2 * n);
  for (int64_t k = 0; k < n; ++k)
    for (int l = 0; l < count; ++l) {
      const Complex c = L::get(y[k], l);
      o[l * 2 * n + 2 * k] = T(c.re);
      o[l * 2 * n + 2 * k + 1] = T(c.im);
    }
}

template <typename Z, typename T>
DL_FFT_INLINE void r2c_rows(const Job& job, int64_t r0, int count, Z* s) {
  using L = Lanes<Z>;
  const int64_t n = job.n, bins = n / 2 + 1, len = job.len();
  const bool even = n % 2 == 0;
  const T* x = static_cast<const T*>(job.x) + r0 * n;
  T* o = static_cast<T*>(job.out) + r0 * 2 * bins;
  Z* z = s;
  Z* y = s + len;
  for (int64_t j = 0; j < len; ++j) {
    Z v{};
    for (int l = 0; l < count; ++l)
      L::set(v, l, double(x[l * n + (even ? 2 * j : j)]), even ? double(x[l * n + 2 * j + 1]) : 0.0);
    z[j] = v;
  }
  transform(*job.plan, z, y, s + 2 * len);
  const double w = double(job.weight);
  for (int64_t k = 0; k < bins; ++k) {
    Z v;
    if (!even) {
      v = y[k];
    } else {
      const Z a = y[k == len ? 0 : k], b = conj(y[k == 0 ? 0 : len - k]);   // Z_k, conj Z_(h-k)
      const Z e = scaled(add(a, b), 0.5), d = turned(sub(a, b), -0.5);    // E_k, O_k = (a - b) / 2i
      v = add(e, mul(d, job.plan->real_tw[size_t(k)]));
    }
    const bool edge = k == 0 || 2 * k == n;   // bins standing for themselves: real
    for (int l = 0; l < count; ++l) {
      const Complex c = L::get(v, l);
      o[l * 2 * bins + 2 * k] = T(edge ? c.re : w * c.re);
      o[l * 2 * bins + 2 * k + 1] = T(edge ? 0.0 : w * c.im);
    }
  }
}

template <typename Z, typename T>
DL_FFT_INLINE void c2r_rows(const Job& job, int64_t r0, int count, Z* s) {
  using L = Lanes<Z>;
  const int64_t n = job.n, bins = n / 2 + 1, len = job.len();
  const bool even = n % 2 == 0;
  const T* yp = static_cast<const T*>(job.x) + r0 * 2 * bins;
  T* o = static_cast<T*>(job.out) + r0 * n;
  const double half_w = double(job.weight) / 2;   // the middle bins' share of each mirrored pair
  Z* z = s;
  Z* x = s + len;
  Z* bin = s + 2 * len;   // the bins, the middle ones weighted, the edges real
  for (int64_t k = 0; k < bins; ++k) {
    const bool edge = k == 0 || 2 * k == n;
    Z v{};
    for (int l = 0; l < count; ++l) {
      const T* b = yp + l * 2 * bins + 2 * k;
      if (edge) L::set(v, l, double(b[0]), 0.0);
      else L::set(v, l, half_w * double(b[0]), half_w * double(b[1]));
    }
    bin[k] = v;
  }
  if (even) {
    for (int64_t k = 0; k < len; ++k) {
      const Z a = bin[k], b = conj(bin[len - k]);   // Y_k, conj Y_(h-k)
      const Complex back{job.plan->real_tw[size_t(k)].re, -job.plan->real_tw[size_t(k)].im};
      z[k] = add(add(a, b), turned(mul(sub(a, b), back), 1.0));   // E + i O
    }
  } else {
    z[0] = bin[0];
    for (int64_t k = 1; k < bins; ++k) {
      z[k] = bin[k];
      z[n - k] = conj(bin[k]);
    }
  }
  transform(*job.plan, z, x, s + 2 * len + bins);
  for (int64_t j = 0; j < len; ++j)
    for (int l = 0; l < count; ++l) {
      const Complex c = L::get(x[j], l);
      if (even) {
        o[l * n + 2 * j] = T(c.re);
        o[l * n + 2 * j + 1] = T(c.im);
      } else {
        o[l * n + j] = T(c.re);
      }
    }
}

template <typename Z, typename T>
DL_FFT_INLINE void rows_of(const Job& job, int64_t r0, int count, void* scratch) {
  Z* s = static_cast<Z*>(scratch);
  switch (job.kind) {
    case Kind::C2C: return c2c_rows<Z, T>(job, r0, count, s);
    case Kind::R2C: return r2c_rows<Z, T>(job, r0, count, s);
    case Kind::C2R: return c2r_rows<Z, T>(job, r0, count, s);
  }
}

// The builds: `count` rows from r0 (at most the pack's lanes; one for the single build).
template <typename T>
void rows_single(const Job& job, int64_t r0, int count, void* s) { rows_of<Complex, T>(job, r0, count, s); }
template <typename T>
void rows_16(const Job& job, int64_t r0, int count, void* s) { rows_of<Pack<16>, T>(job, r0, count, s); }
#ifdef DL_WIDTH_BUILDS
template <typename T>
DL_TARGET_AVX2 void rows_32(const Job& job, int64_t r0, int count, void* s) { rows_of<Pack<32>, T>(job, r0, count, s); }
template <typename T>
DL_TARGET_AVX512 void rows_64(const Job& job, int64_t r0, int count, void* s) { rows_of<Pack<64>, T>(job, r0, count, s); }
#endif

// A pack's room is capped so that a batch of long rows does not take vector_bytes() / 8
// times a row's memory: such rows run alone.
constexpr int64_t kPackRoomBytes = int64_t(8) << 20;

// The scratch of each thread of a region, made by the thread that starts it (nothing
// inside a parallel region may allocate or throw), in Pack<64> units (aligned for every
// build), not zeroed. Kept by the calling thread for its next transform while all its
// parts together hold at most kKeptScratchBytes: a batch of short rows then touches no
// fresh pages.
constexpr size_t kKeptScratchBytes = size_t(8) << 20;
struct Scratch {
  std::vector<std::unique_ptr<Pack<64>[]>> parts;
  size_t units = 0;   // of each part

  void release_if_large() {
    if (units * sizeof(Pack<64>) * parts.size() > kKeptScratchBytes) {
      parts.clear();
      units = 0;
    }
  }
};
Scratch& scratch_for(int threads, size_t bytes) {
  thread_local Scratch s;
  const size_t units = (bytes + sizeof(Pack<64>) - 1) / sizeof(Pack<64>);
  if (units > s.units) {
    s.parts.clear();
    s.units = units;
  }
  while (int(s.parts.size()) < threads) s.parts.emplace_back(new Pack<64>[s.units]);
  return s;
}

// Runs job over `rows` rows: in packs when there are several and they fit, on several
// threads when the work is worth it. (Nothing inside may throw: each thread's scratch is
// allocated before, and one only where the groups run on one thread.)
template <typename T>
void run_rows(const Job& job, int64_t rows) {
  using Run = void (*)(const Job&, int64_t, int, void*);
  int lanes = 1;
  size_t value_bytes = sizeof(Complex);
  Run run = rows_single<T>;
  const int bytes = vector_bytes();
  if (rows >= 2 && job.room() * bytes * 2 <= kPackRoomBytes) {
    lanes = bytes / int(sizeof(double));
    value_bytes = size_t(2 * bytes);
    run = rows_16<T>;
#ifdef DL_WIDTH_BUILDS
    if (bytes == 32) run = rows_32<T>;
    if (bytes == 64) run = rows_64<T>;
#endif
  }
  const int64_t groups = (rows + lanes - 1) / lanes;
  const double work = double(rows) * double(job.plan->m) * 8;
  const bool threaded = groups >= 2 && work >= double(kParallelGrain);
  const int threads = threaded ? max_threads() : 1;
  Scratch& scratch = scratch_for(threads, size_t(job.room()) * value_bytes);
  parallel_units(groups, threaded ? work : 0, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t r0 = g * lanes;
      run(job, r0, int(std::min<int64_t>(lanes, rows - r0)), scratch.parts[size_t(thread)].get());
    }
  });
  scratch.release_if_large();
}

// The plan of a length, sign and kind (real: for a real signal of twice the length): made
// once per calling thread and kept among its last kKeptPlans, of lengths up to
// kKeptPlanLength (a plan holds n to 1.5 n complex values, Bluestein's up to about 13 n:
// at most 8 x 13 x 2^14 x 16 bytes, 27 MB, a thread), as a training step calls the same
// transforms again.
constexpr size_t kKeptPlans = 8;
constexpr int64_t kKeptPlanLength = int64_t(1) << 14;
struct KeptPlan {
  int64_t n;
  bool inverse, real;
  std::shared_ptr<const Plan> plan;
};
std::shared_ptr<const Plan> plan_for(int64_t n, bool inverse, bool real) {
  if (n > kKeptPlanLength) return std::make_shared<const Plan>(n, inverse, real);
  thread_local std::list<KeptPlan> kept;   // the most recently used first
  for (auto it = kept.begin(); it != kept.end(); ++it)
    if (it->n == n && it->inverse == inverse && it->real == real) {
      kept.splice(kept.begin(), kept, it);
      return it->plan;
    }
  kept.push_front({n, inverse, real, std::make_shared<const Plan>(n, inverse, real)});
  if (kept.size() > kKeptPlans) kept.pop_back();
  return kept.front().plan;
}

// A real signal's transform of n: the complex one of n / 2 for an even n, else of n.
template <typename T>
void real_rows(Kind kind, const Tensor& out, const Tensor& x, int64_t n, int64_t weight, int64_t rows) {
  const bool even = n % 2 == 0;
  const std::shared_ptr<const Plan> plan = plan_for(even ? n / 2 : n, kind == Kind::C2R, even);
  const Job job{kind, plan.get(), n, weight, x.data<T>(), out.data<T>()};
  run_rows<T>(job, rows);
}

}  // namespace

void fft_c2c(const Tensor& out, const Tensor& x, bool inverse) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 2 && x.size(x.dim() - 1) == 2);
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 2);
  const std::shared_ptr<const Plan> plan = plan_for(n, inverse, false);
  DL_DISPATCH_FLOAT(x.dtype(), "fft", {
    const Job job{Kind::C2C, plan.get(), n, 1, x.data<scalar_t>(), out.data<scalar_t>()};
    run_rows<scalar_t>(job, x.numel() / (2 * n));
  });
}

void fft_r2c(const Tensor& out, const Tensor& x, int64_t weight) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 1 && (weight == 1 || weight == 2));
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 1);
  DL_DISPATCH_FLOAT(x.dtype(), "rfft", (real_rows<scalar_t>(Kind::R2C, out, x, n, weight, x.numel() / n)));
}

void fft_c2r(const Tensor& out, const Tensor& y, int64_t weight) {
  DL_ASSERT(y.is_contiguous() && out.is_contiguous() && y.dim() >= 2 && (weight == 1 || weight == 2));
  if (out.numel() == 0) return;
  const int64_t n = out.size(out.dim() - 1);
  DL_ASSERT(y.size(y.dim() - 2) == n / 2 + 1 && y.size(y.dim() - 1) == 2 && y.numel() / (2 * (n / 2 + 1)) == out.numel() / n);
  DL_DISPATCH_FLOAT(y.dtype(), "irfft", (real_rows<scalar_t>(Kind::C2R, out, y, n, weight, out.numel() / n)));
}

}  // namespace dl::cpu
