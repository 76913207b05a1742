// Kernel math, written once for the host and the device (docs/design.md, "Kernel math written
// once").
//
// Each functor is a plain struct whose call operator is DL_HD: tensor/cpu runs it in
// vectorisable loops, gpu/ in grid-stride CUDA kernels, and the CPU tests check it.
// Integer-valued functors must avoid UB (division by zero, INT_MIN / -1, shifts).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tensor/bessel.h"
#include "tensor/gamma_inc.h"
#include "tensor/special.h"

#ifdef __CUDACC__
#define DL_HD __host__ __device__ __forceinline__
#define DL_HD_INLINED DL_HD
#else
#define DL_HD inline
// Inlined even where GCC judges a function too large to be: the loops that call it
// vectorise only if no call is left in them (Note [erf in double]).
#define DL_HD_INLINED [[gnu::always_inline]] inline
#endif

namespace dl::fn {

template <typename T> constexpr bool kIsFloat = std::is_floating_point_v<T>;

// Integer arithmetic wraps around (two's complement), as PyTorch's integer tensors do.
// Signed overflow is undefined behaviour in C++, so +, - and * on signed integers are
// computed in the unsigned type of the same width (wrap_t) and converted back.
template <typename T, bool = std::is_integral_v<T> && !std::is_same_v<T, bool>>
struct Wrap { using type = T; };
template <typename T> struct Wrap<T, true> { using type = std::make_unsigned_t<T>; };
template <typename T> using wrap_t = typename Wrap<T>::type;

// Note [Float exponentials in double]
// e^x, tanh and sigmoid of a float32 are computed in double by one branch-free
// polynomial (exp_split), and log by another (log_double; expm1, log1p and softplus
// from the two), which the CPU loops vectorise: libm's expf, logf and tanhf are
// calls (tanhf and the expm1f it calls took about 90 instructions an element here, a
// tenth of a recorded 16-element op). Double's 29 spare bits make the float result the
// correctly rounded one except when the exact value lies within about 2^-45 (relative)
// of a midpoint between two floats. float64 keeps libm. Nothing here may branch on a
// value (a select whose one side divides is not if-converted while FP exceptions are
// honoured, and the loop would not vectorise): tanh uses e^y - 1, which is exact where
// a select would have been needed.
//
// e^y = scale * (1 + q): y = k ln2 + r with |r| <= ln2/2 (Cody and Waite's two-part ln2,
// so k times its first part is exact), q = e^r - 1 by its Taylor series to degree 13
// (remainder below 2^-56), scale = 2^k built from k's bits. y is clamped to +-700 first,
// where e^y is far outside float's range either way and 2^k stays a normal double; a
// NaN passes through the clamp and the arithmetic.
struct ExpSplit {
  double scale, q;
};
constexpr double kLn2Hi = 6.93147180369123816490e-01;   // ln2's first 32 bits: k times it is exact
constexpr double kLn2Lo = 1.90821492927058770002e-10;   // the rest of ln2
DL_HD ExpSplit exp_split(double y) {
  y = y < -700.0 ? -700.0 : y;
  y = y > 700.0 ? 700.0 : y;
  constexpr double kShift = 0x1.8p52;   // adding it rounds to an integer, kept in the low bits
  const double n = y * 1.4426950408889634 + kShift;
  const double k = n - kShift;
  double r = y - k * kLn2Hi;
  r = r - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  uint64_t bits;
  std::memcpy(&bits, &n, sizeof bits);   // 0x4338000000000000 + k
  bits = (bits - 0x4338000000000000ull + 1023) << 52;
  ExpSplit s;
  std::memcpy(&s.scale, &bits, sizeof s.scale);
  s.q = p * r;
  return s;
}
DL_HD double exp_double(double y) {
  const ExpSplit s = exp_split(y);
  return s.scale + s.scale * s.q;
}
// e^y - 1, with no cancellation: for |y| <= ln2/2 it is q itself.
DL_HD double expm1_double(double y) {
  const ExpSplit s = exp_split(y);
  return (s.scale - 1.0) + s.scale * s.q;
}

// log(2^e m) for m in [1, 2] and an integer e (as a double): m over sqrt(2) is halved
// (and e raised), then log m = 2 atanh(s), s = (m - 1) / (m + 1) (m - 1 exact), |s| <=
// 0.172, by its series to s^23 (remainder below 2^-56); e ln2 in two parts, as in
// exp_split.
DL_HD double log_reduced(double m, double e) {
  const bool high = m > 1.4142135623730951;
  m = high ? m * 0.5 : m;
  e = high ? e + 1.0 : e;
  const double s = (m - 1.0) / (m + 1.0), z = s * s, t = 2.0 * s;
  constexpr double kInverseOdd[] = {1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                                    1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3};
  double p = 1.0 / 23;
  for (double c : kInverseOdd) p = p * z + c;   // (unrolled: the same operations, in order)
  return e * kLn2Hi + (e * kLn2Lo + (t + t * (z * p)));
}

// log y of a float's value y, the same way (Note [Float exponentials in double]): y = 2^e m
// with m in [1, 2), e and m read from y's bits (e's field turned into a
// double by adding it to 2^52's bits: no integer conversion, which AVX-512F lacks for
// 64-bit lanes). Zero, negative values, infinity and NaN are selected at the end. Over
// 20 million random floats every result equalled libm's double log rounded once, where
// libm's logf differed in 3,841.
DL_HD double log_double(double y) {
  uint64_t bits;
  std::memcpy(&bits, &y, sizeof bits);
  uint64_t eb = (bits >> 52 & 0x7ffu) | 0x4330000000000000ull;
  double e;
  std::memcpy(&e, &eb, sizeof e);
  e = e - (0x1p52 + 1023.0);
  uint64_t mb = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  std::memcpy(&m, &mb, sizeof m);
  double r = log_reduced(m, e);
  const double inf = std::numeric_limits<double>::infinity();
  r = y == inf ? inf : r;
  r = y == 0.0 ? -inf : r;
  return y < 0.0 || y != y ? std::numeric_limits<double>::quiet_NaN() : r;
}

// log(1 + y) for a float's value y: below 2^-29 in size, y - y^2/2 (the next term is under
// 2^-58 of it); else log of 1 + y, which is exact in double.
DL_HD double log1p_double(double y) {
  return std::fabs(y) < 0x1p-29 ? y - 0.5 * y * y : log_double(1.0 + y);
}

// log(1 + d) for a double d in (0, 1] (softplus's e^-|x|): u = 1 + d is in (1, 2], so
// there is no exponent to read; u's rounding is undone by d / (u - 1) (u - 1 exact:
// Goldberg's way), and below 2^-29, d - d^2/2.
DL_HD double log1p_unit_double(double d) {
  const double u = 1.0 + d;
  const double r = log_reduced(u, 0.0) * (d / (u - 1.0));
  return d < 0x1p-29 ? d - 0.5 * d * d : r;
}

// Note [erf in double]
// erf and the normal CDF of a float32 (erf, gelu and gelu's gradient) are computed in
// double too (Note [Float exponentials in double]), by branch-free polynomials that the
// loops vectorise, not by libm's erff, a call per element. With z = |x|: below 1.25,
// erf(z) = z P(z^2); from there to 10.5, erfc(z) = e^(-z^2) Q(t), t = 1 / (1 + z)
// (erfc(10.5) is about 1e-49, far under float's least value). In t, e^(z^2) erfc(z) is
// smooth enough for one polynomial over the whole range; in z it took four, picked by
// selects, and the loop ran several times slower (docs/performance.md, "Measurements
// behind the code"). The polynomials are least-squares fits in the Chebyshev basis
// against 40-digit erf and erfc, within 3.8e-15 relative (tools/fit_erf.py prints them,
// and measures that), so the float result is the correctly rounded one except within
// about 2^-47 of a midpoint: over 5 million floats, none differed from libm's double
// erf and erfc rounded once, where libm's erff differed in 27,661. z^2 is exact (x has
// 24 bits), so e^(-z^2) loses nothing to its argument, and erfc keeps its relative
// accuracy in the tail: gelu(-6) is -5.9e-9, where the float formula
// x (1 + erf(x / sqrt 2)) / 2 cancels to 0. The loop computes every part for every
// element and is bound by their count, not their latency (Estrin's scheme and fused
// multiply-adds did not change its time); bench/ `gelu1e6` times it
// (docs/performance.md, "Pointwise functions on large tensors").

constexpr double kErfSplit = 1.25;   // erf(z) = z P(z^2) below it, e^(-z^2) Q(t) from it

// erf(z) / z for w = z^2 in [0, 1.5625], the polynomial in u by Estrin's scheme (pairs
// a0 + a1 u, those paired with u^2, then with u^4, ...), as tools/fit_erf.py checks it.
DL_HD_INLINED double erf_small_double(double w) {
  constexpr double a[] = {
      0.8923127014483732, -0.18785153701199064, 0.03998833490266454, -0.00704748797713795,
      0.0010344964249732053, -0.00012916310193354788, 1.3987572562962096e-05, -1.3353425118904342e-06,
      1.1388363703012066e-07, -8.771479300594817e-09, 6.157042644765554e-10, -4.01195732448436e-11,
      2.425077600906062e-12};
  const double u = w * 1.28 - 1.0, u2 = u * u, u4 = u2 * u2, u8 = u4 * u4;
  const double b0 = a[0] + a[1] * u, b1 = a[2] + a[3] * u, b2 = a[4] + a[5] * u;
  const double b3 = a[6] + a[7] * u, b4 = a[8] + a[9] * u, b5 = a[10] + a[11] * u;
  const double c0 = b0 + b1 * u2, c1 = b2 + b3 * u2, c2 = b4 + b5 * u2;
  return (c0 + c1 * u4) + (c2 + a[12] * u4) * u8;
}

// e^(z^2) erfc(z) for z in [1.25, 10.5], z clamped to it, as a polynomial in
// t = 1 / (1 + z) (Estrin's scheme, as above).
DL_HD_INLINED double erfc_scaled_double(double z) {
  constexpr double a[] = {
      0.1928034239879244, 0.1587553974383272, 0.018319754422674816, -0.00168389918734595,
      -0.00047756847384658734, 0.00010120143509558057, 1.1200371874621086e-05, -7.576571575516894e-06,
      7.409856948922634e-07, 3.7817585676876876e-07, -1.5398119989910103e-07, 1.123253208192791e-08,
      1.049701405603518e-08, -4.521513351192864e-09, 4.073349439557247e-10, 3.5152192429309216e-10,
      -1.1800840787593462e-10};
  z = z < kErfSplit ? kErfSplit : z;
  z = z > 10.5 ? 10.5 : z;
  const double u = (1.0 / (1.0 + z) - 0.2657004830917874) * 5.594594594594595;
  const double u2 = u * u, u4 = u2 * u2, u8 = u4 * u4, u16 = u8 * u8;
  const double b0 = a[0] + a[1] * u, b1 = a[2] + a[3] * u, b2 = a[4] + a[5] * u, b3 = a[6] + a[7] * u;
  const double b4 = a[8] + a[9] * u, b5 = a[10] + a[11] * u, b6 = a[12] + a[13] * u, b7 = a[14] + a[15] * u;
  const double c0 = b0 + b1 * u2, c1 = b2 + b3 * u2, c2 = b4 + b5 * u2, c3 = b6 + b7 * u2;
  return ((c0 + c1 * u4) + (c2 + c3 * u4) * u8) + a[16] * u16;
}

// Both sides of the split for z = |x| or |x| / sqrt 2 and w = z^2 (exact from a float's
// x): erf(z) as the small side computes it, erfc(z) as the far side does, and e^(-w), 0
// past double's range. Every element computes both; the caller selects.
struct ErfSides {
  double erf, erfc, gauss;
};
DL_HD_INLINED ErfSides erf_sides(double z, double w) {
  const double g = w < 700.0 ? exp_double(-w) : 0.0;
  return ErfSides{z * erf_small_double(w), g * erfc_scaled_double(z), g};
}

// erf(x) for a float's value x.
DL_HD_INLINED double erf_double(double x) {
  const double z = std::fabs(x);
  const ErfSides e = erf_sides(z, x * x);
  return std::copysign(z < kErfSplit ? e.erf : 1.0 - e.erfc, x);
}

// Phi(x), the normal CDF, and e^(-x^2 / 2), for a float's value x. Past double's range
// of e^(-x^2 / 2) both are 0 (so -inf Phi(-inf) is NaN, as eager's x * 0 was). (Halving
// is exact here: no value near the subnormals.)
struct NormalCdf {
  double cdf, gauss;
};
DL_HD_INLINED NormalCdf normal_cdf_double(double x) {
  const double z = std::fabs(x) * 0.70710678118654752440;
  const ErfSides e = erf_sides(z, 0.5 * x * x);
  const bool neg = x < 0.0;
  const double near = neg ? 0.5 - 0.5 * e.erf : 0.5 + 0.5 * e.erf;
  const double far = neg ? 0.5 * e.erfc : 1.0 - 0.5 * e.erfc;
  return NormalCdf{z < kErfSplit ? near : far, e.gauss};
}

// ---- unary ----
struct NegFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (kIsFloat<T>) return -x; else return T(wrap_t<T>(0) - wrap_t<T>(x)); } };
struct AbsFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_unsigned_v<T> || std::is_same_v<T, bool>) return x;
  else if constexpr (kIsFloat<T>) return (x < T(0) ? -x : x) + T(0);   // (+ 0: |-0| is +0, as VecAbs's)
  else return x < T(0) ? T(wrap_t<T>(0) - wrap_t<T>(x)) : x; } };  // |INT_MIN| wraps to INT_MIN
// -1, 0 or 1; 0 for 0, -0 and NaN, as PyTorch's.
struct SignFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_unsigned_v<T>) return T(x != T(0));
  else return T((T(0) < x) - (x < T(0))); } };
struct ExpFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) return float(exp_double(x));  // Note [Float exponentials in double]
  else return std::exp(x); } };
struct LogFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) return float(log_double(double(x)));  // Note [Float exponentials in double]
  else return std::log(x); } };
struct Log1pFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) return float(log1p_double(double(x)));  // Note [Float exponentials in double]
  else return std::log1p(x); } };
struct Expm1Fn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) {   // Note [Float exponentials in double]; -0 keeps its sign
    const double y = double(x);
    return float(y == 0.0 ? y : expm1_double(y));
  } else {
    return std::expm1(x);
  } } };
struct SqrtFn { template <typename T> DL_HD T operator()(T x) const { return std::sqrt(x); } };
struct RsqrtFn { template <typename T> DL_HD T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct SinFn { template <typename T> DL_HD T operator()(T x) const { return std::sin(x); } };
struct CosFn { template <typename T> DL_HD T operator()(T x) const { return std::cos(x); } };
struct TanFn { template <typename T> DL_HD T operator()(T x) const { return std::tan(x); } };
struct AsinFn { template <typename T> DL_HD T operator()(T x) const { return std::asin(x); } };
struct AcosFn { template <typename T> DL_HD T operator()(T x) const { return std::acos(x); } };
struct AtanFn { template <typename T> DL_HD T operator()(T x) const { return std::atan(x); } };
struct SinhFn { template <typename T> DL_HD T operator()(T x) const { return std::sinh(x); } };
struct CoshFn { template <typename T> DL_HD T operator()(T x) const { return std::cosh(x); } };
struct AsinhFn { template <typename T> DL_HD T operator()(T x) const { return std::asinh(x); } };
struct AcoshFn { template <typename T> DL_HD T operator()(T x) const { return std::acosh(x); } };
struct AtanhFn { template <typename T> DL_HD T operator()(T x) const { return std::atanh(x); } };
struct Exp2Fn { template <typename T> DL_HD T operator()(T x) const { return std::exp2(x); } };
struct Log2Fn { template <typename T> DL_HD T operator()(T x) const { return std::log2(x); } };
struct Log10Fn { template <typename T> DL_HD T operator()(T x) const { return std::log10(x); } };
struct ErfcFn { template <typename T> DL_HD T operator()(T x) const { return std::erfc(x); } };
struct TanhFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) {   // Note [Float exponentials in double]
    // tanh |x| = -m / (2 + m), m = e^(-2|x|) - 1
    const double m = expm1_double(-2.0 * std::fabs(double(x)));
    return float(std::copysign(-m / (2.0 + m), double(x)));
  } else {
    return std::tanh(x);
  } } };
struct SigmoidFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) {   // Note [Float exponentials in double]
    return float(1.0 / (1.0 + exp_double(-double(x))));
  } else {
    // Stable for large |x|: never exponentiates a large positive number.
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  } } };
struct ReluFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (kIsFloat<T>) { if (x != x) return x; }
  return x > T(0) ? x : T(0); } };
struct SoftplusFn { template <typename T> DL_HD T operator()(T x) const {
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
  if constexpr (std::is_same_v<T, float>) {   // Note [Float exponentials in double]
    const double y = double(x);
    return float((y > 0.0 ? y : 0.0) + log1p_unit_double(exp_double(-std::fabs(y))));
  } else {
    return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
  } } };
struct ErfFn { template <typename T> DL_HD_INLINED T operator()(T x) const {
  if constexpr (std::is_same_v<T, float>) return float(erf_double(double(x)));  // Note [erf in double]
  else return std::erf(x); } };
// GELU as PyTorch's default (approximate='none'): x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2.
// The gamma family and erfinv (tensor/special.h: Note [The gamma family], Note [erfinv]),
// in double, float32 rounded once.
struct LgammaFn { template <typename T> DL_HD T operator()(T x) const { return T(special::lgamma(double(x))); } };
struct DigammaFn { template <typename T> DL_HD T operator()(T x) const { return T(special::digamma(double(x))); } };
struct ErfinvFn { template <typename T> DL_HD T operator()(T x) const { return T(special::erfinv(double(x))); } };
// Bessel functions of orders 0 and 1 (tensor/bessel.h: Note [Bessel functions]), in double.
#define DL_BESSEL_FN(Name, expr) \
  struct Name { template <typename T> DL_HD T operator()(T v) const { const double x = double(v); return T(expr); } };
DL_BESSEL_FN(I0Fn, special::bessel_i0(x))
DL_BESSEL_FN(I0eFn, special::bessel_i0e(x))
DL_BESSEL_FN(I1Fn, special::bessel_i1(x))
DL_BESSEL_FN(I1eFn, special::bessel_i1e(x))
DL_BESSEL_FN(BesselJ0Fn, special::bessel_j(0, x))
DL_BESSEL_FN(BesselJ1Fn, special::bessel_j(1, x))
DL_BESSEL_FN(BesselY0Fn, special::bessel_y(0, x))
DL_BESSEL_FN(BesselY1Fn, special::bessel_y(1, x))
DL_BESSEL_FN(BesselK0Fn, special::bessel_k(0, x))
DL_BESSEL_FN(BesselK1Fn, special::bessel_k(1, x))
DL_BESSEL_FN(BesselK0eFn, special::bessel_k_scaled(0, x))
DL_BESSEL_FN(BesselK1eFn, special::bessel_k_scaled(1, x))
DL_BESSEL_FN(SphericalJ0Fn, special::spherical_bessel_j0(x))
#undef DL_BESSEL_FN
struct GeluFn {
  template <typename T> DL_HD_INLINED T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {   // Note [erf in double]
      return float(double(x) * normal_cdf_double(double(x)).cdf);
    } else {
      return x * (T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440))));
    }
  }
};
struct FloorFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (kIsFloat<T>) return std::floor(x); else return x; } };
struct CeilFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (kIsFloat<T>) return std::ceil(x); else return x; } };
struct RoundFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (kIsFloat<T>) return std::nearbyint(x); else return x; } };  // half to even
struct NotFn { template <typename T> DL_HD bool operator()(T x) const { return !(x != T(0)); } };
// ~x of an integer (bool's is logical_not's: tensor/pointwise.cpp). Note [Bits of integers]
struct BitwiseNotFn { template <typename T> DL_HD T operator()(T x) const {
  if constexpr (kIsFloat<T> || std::is_same_v<T, bool>) return T(0); else return T(~x); } };

// ---- binary ----
struct AddFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (std::is_same_v<T, bool>) return a || b; else return T(wrap_t<T>(a) + wrap_t<T>(b)); } };
struct SubFn { template <typename T> DL_HD T operator()(T a, T b) const {
  return T(wrap_t<T>(a) - wrap_t<T>(b)); } };
struct MulFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (std::is_same_v<T, bool>) return a && b; else return T(wrap_t<T>(a) * wrap_t<T>(b)); } };
struct DivFn { template <typename T> DL_HD T operator()(T a, T b) const { return a / b; } };
// C's fmod: the remainder with the sign of the dividend, a - trunc(a / b) b exactly. For
// integers, the division by zero is reported by the caller before the kernel runs.
struct FmodFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) return std::fmod(a, b);
  else if constexpr (std::is_unsigned_v<T>) return b == T(0) ? T(0) : T(a % b);
  else return b == T(0) || b == T(-1) ? T(0) : T(a % b); } };   // (-1: avoids INT_MIN % -1)
// a / b rounded toward -infinity, as PyTorch's div_floor: for floats from the exact
// remainder, so that 1 // 0.1 is 9 (a / b rounds to 10), a quotient within 1/2 of a
// whole number rounded to it, a zero quotient keeping a / b's sign, and a / b itself
// for b = 0; for integers exact at any size (INT_MIN // -1 wraps to INT_MIN).
struct FloorDivideFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) {
    if (b == T(0)) return a / b;
    const T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
    if (div == T(0)) return std::copysign(T(0), a / b);
    T fl = std::floor(div);
    if (div - fl > T(0.5)) fl += T(1);
    return fl;
  } else if constexpr (std::is_unsigned_v<T>) {
    return b == T(0) ? T(0) : T(a / b);
  } else {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return T(wrap_t<T>(0) - wrap_t<T>(a));
    T q = T(a / b);
    if (a % b != T(0) && ((a < T(0)) != (b < T(0)))) q = T(q - T(1));
    return q;
  } } };
// Floor modulo with the sign of the divisor (Lua's % and Python's %). Integer
// division by zero is reported by the caller before the kernel runs.
struct ModFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) {
    T r = std::fmod(a, b);
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
    return r;
  } else if constexpr (std::is_unsigned_v<T>) {
    return b == T(0) ? T(0) : T(a % b);
  } else {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return T(0);  // avoids INT_MIN % -1
    T r = T(a % b);
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = T(r + b);
    return r;
  } } };
struct PowFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) return std::pow(a, b);
  else {
    if constexpr (std::is_signed_v<T>) {
      if (b < T(0)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & 1) ? T(-1) : T(1)) : T(0));
    }
    using U = std::make_unsigned_t<T>;
    U base = U(a), r = 1;
    uint64_t e = uint64_t(b);
    while (e) { if (e & 1) r = U(r * base); base = U(base * base); e >>= 1; }
    return T(r);
  } } };
// NaN from either side wins; on a tie (0 and -0) the first operand, as PyTorch's.
struct MaximumFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) { if (a != a) return a; if (b != b) return b; }
  return a >= b ? a : b; } };
struct MinimumFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) { if (a != a) return a; if (b != b) return b; }
  return a <= b ? a : b; } };
// polygamma(n, x): n (a whole number) first, as PyTorch's torch.polygamma(n, x).
struct PolygammaFn { template <typename T> DL_HD T operator()(T n, T x) const {
  return T(special::polygamma(double(n), double(x))); } };
// zeta(x, q): Hurwitz's, sum over k >= 0 of (q + k)^-x, x first as PyTorch's.
struct ZetaFn { template <typename T> DL_HD T operator()(T x, T q) const {
  return T(special::zeta(double(x), double(q))); } };
// The incomplete gamma pair and Gamma draws' slopes (tensor/gamma_inc.h: Note
// [Incomplete gamma], Note [Gamma draws' slopes]), in double.
struct IgammaFn { template <typename T> DL_HD T operator()(T a, T x) const {
  return T(special::igamma(double(a), double(x))); } };
struct IgammacFn { template <typename T> DL_HD T operator()(T a, T x) const {
  return T(special::igammac(double(a), double(x))); } };
struct StandardGammaLogGradFn { template <typename T> DL_HD T operator()(T alpha, T logx) const {
  return T(special::gamma_draw_log_slope(double(alpha), double(logx))); } };
struct Atan2Fn { template <typename T> DL_HD T operator()(T a, T b) const { return std::atan2(a, b); } };

// Note [Bits of integers]
// The bitwise ops and gcd/lcm take integers and bool (kIntOnly: the front end refuses
// floats; the float branches are never run). Signed values are two's complement, as
// PyTorch's. A shift by a negative amount or by the width or more is 0 to the left and
// the sign's fill to the right (PyTorch 2's rule; 1.13 left it to the machine, where
// x86 took the amount modulo the width). gcd is never negative and gcd(0, 0) = 0; lcm
// is |a / gcd * b|, 0 where either is 0; both in unsigned arithmetic, so that the
// smallest int64 (which has no positive) gives itself, as PyTorch's.
template <typename T> DL_HD bool negative(T a) {
  if constexpr (std::is_signed_v<T>) return a < T(0); else return false;
}
template <typename T> DL_HD auto magnitude(T a) {
  using U = std::make_unsigned_t<T>;
  return negative(a) ? U(U(0) - U(a)) : U(a);
}
template <typename T> DL_HD auto unsigned_gcd(T a, T b) {
  auto x = magnitude(a), y = magnitude(b);
  while (y != 0) { auto r = decltype(x)(x % y); x = y; y = r; }
  return x;
}
struct BitwiseAndFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) return T(0); else return T(a & b); } };
struct BitwiseOrFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) return T(0); else return T(a | b); } };
struct BitwiseXorFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T>) return T(0); else return T(a ^ b); } };
struct LeftShiftFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T> || std::is_same_v<T, bool>) return T(0);
  else {
    using U = std::make_unsigned_t<T>;
    if (negative(b) || b >= T(8 * sizeof(T))) return T(0);
    return T(U(U(a) << unsigned(b)));
  } } };
struct RightShiftFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T> || std::is_same_v<T, bool>) return T(0);
  else {
    if (negative(b) || b >= T(8 * sizeof(T))) return negative(a) ? T(-1) : T(0);
    return T(a >> unsigned(b));   // arithmetic for signed types (C++20's rule, and every compiler's)
  } } };
struct GcdFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T> || std::is_same_v<T, bool>) return T(0); else return T(unsigned_gcd(a, b)); } };
struct LcmFn { template <typename T> DL_HD T operator()(T a, T b) const {
  if constexpr (kIsFloat<T> || std::is_same_v<T, bool>) return T(0);
  else {
    const auto g = unsigned_gcd(a, b);
    if (g == 0) return T(0);
    return T(decltype(g)(magnitude(a) / g * magnitude(b)));
  } } };
// Derivatives in one pass (ops.def): the same arithmetic, in the same order, as the
// formulas of recorded ops they replace, so gradients keep their bits.
struct TanhBackwardFn { template <typename T> DL_HD T operator()(T g, T y) const { return g * (T(1) - y * y); } };
struct SigmoidBackwardFn { template <typename T> DL_HD T operator()(T g, T y) const { return g * (y * (T(1) - y)); } };
// 0 where x <= 0, g elsewhere (NaN x included, as PyTorch's threshold_backward).
struct ReluBackwardFn { template <typename T> DL_HD T operator()(T g, T x) const { return x <= T(0) ? T(0) : g; } };
// d/dx of x Phi(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2 / 2) / sqrt(2 pi).
struct GeluBackwardFn {
  template <typename T> DL_HD_INLINED T operator()(T g, T x) const {
    if constexpr (std::is_same_v<T, float>) {   // Note [erf in double]
      const double xd = double(x);
      const NormalCdf n = normal_cdf_double(xd);
      return float(double(g) * (n.cdf + xd * (n.gauss * 0.39894228040143267794)));
    } else {
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
      const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
      return g * (cdf + x * pdf);
    }
  }
};

// ---- comparisons (bool results) ----
struct EqFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a == b; } };
struct NeFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a != b; } };
struct LtFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a < b; } };
struct LeFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a <= b; } };
struct GtFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a > b; } };
struct GeFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a >= b; } };
struct AndFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a != T(0) && b != T(0); } };
struct OrFn { template <typename T> DL_HD bool operator()(T a, T b) const { return a != T(0) || b != T(0); } };

// ---- where: c ? a : b ----
// On the host as a select of bits, not a branch: the loops over dense operands then
// vectorise, and a random mask (ReLU's gradient is masked_fill through where) costs no
// mispredictions; the branchy form took 7% of a small conv net's training step.
template <std::size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };
// clamp(x, lo, hi) as PyTorch's: NaN from x or either bound wins; lo applies first, so
// lo > hi gives hi everywhere; x on a tie with a bound (0 and -0) is kept.
template <typename T>
struct ClampFn {
  T lo, hi;
  DL_HD T operator()(T v) const {
    if constexpr (kIsFloat<T>) {
      if (v != v) return v;
      if (lo != lo) return lo;
      if (hi != hi) return hi;
    }
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
  }
};
struct WhereFn { template <typename T> DL_HD T operator()(bool c, T a, T b) const {
#ifdef __CUDA_ARCH__
  return c ? a : b;  // a predicated select already
#else
  using U = typename Bits<sizeof(T)>::type;
  const U m = U(U(0) - U(c));
  U ua, ub;
  std::memcpy(&ua, &a, sizeof(T));
  std::memcpy(&ub, &b, sizeof(T));
  const U r = U((ua & m) | (ub & U(~m)));
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
#endif
} };

// ---- conversion with PyTorch's semantics for out-of-range floats to ints avoided ----
template <typename To, typename From>
DL_HD To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Saturating, NaN -> 0: float-to-int overflow is UB in C++.
    if (!(v == v)) return To(0);
    constexpr double lo = double(std::numeric_limits<To>::min());
    constexpr double hi = double(std::numeric_limits<To>::max());
    if (double(v) <= lo) return std::numeric_limits<To>::min();
    if (double(v) >= hi) return std::numeric_limits<To>::max();
    return To(v);
  } else return To(v);
}

// A number beside an integer tensor in arithmetic, as PyTorch's: a whole number wraps to
// the tensor's width (two's complement: uint8 + 256 adds 0, uint8 + (-1) subtracts 1,
// int32 & 0xFFFFFFFF keeps every bit); other numbers convert as convert's.
template <typename T>
DL_HD T scalar_operand(double s) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (s >= -9223372036854775808.0 && s < 9223372036854775808.0 && s == double(int64_t(s)))
      return T(static_cast<std::make_unsigned_t<T>>(uint64_t(int64_t(s))));
  }
  return convert<T>(s);
}

}  // namespace dl::fn
