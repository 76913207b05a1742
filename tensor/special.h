// Special functions in double, for the functors of lgamma, digamma, polygamma and
// erfinv (tensor/functors.h) on the host and the device alike. float32 calls them in
// double and rounds once, as the exponentials of Note [Float exponentials in double] do.
//
// Note [The gamma family]
//   lgamma(x)       log |Gamma(x)|: the C library's, lgamma_r on the host (plain lgamma
//                   writes the global signgam, a data race between OpenMP threads).
//   digamma(x)      psi = Gamma' / Gamma: moved to x >= 10 by psi(x) = psi(x + 1) - 1 / x,
//                   then the asymptotic series ln x - 1/(2x) - sum B_2k / (2k x^2k) to its
//                   seventh term (below 1e-17 there); x < 0 by the reflection psi(x) =
//                   psi(1 - x) - pi / tan(pi x), the tangent taken of x's fractional part
//                   (exact) rather than of pi x. psi(+-0) = -+infinity and psi at a negative
//                   integer is NaN, as PyTorch's and SciPy's.
//   polygamma(n, x) the n-th derivative of psi; for n >= 1 (-1)^(n+1) n! zeta(n + 1, x).
//   zeta(s, q)      Hurwitz's: its terms summed directly up to q + k >= max(9, s) (or
//                   until the rest is below 1e-17 of the sum), then the Euler-Maclaurin
//                   tail, whose terms shrink by about ((s + 2j) / (2 pi a))^2, with up to
//                   twelve Bernoulli terms (relative error below 1e-16). For q < 0 and a
//                   whole s, the terms down to q + k < 1 fold into two more zetas of
//                   positive argument (below), so that no loop runs |q| times.
// Each is checked against PyTorch float64 in tests/lua/test_breadth.lua, and to second
// order by the gradient check (lgamma' = digamma, digamma' = polygamma(1, x),
// polygamma(n, x)' = polygamma(n + 1, x)).
//
// Note [erfinv]
// erfinv(y) starts from Giles' single-precision approximation ("Approximating the erfinv
// function", GPU Computing Gems Jade Edition, 2011: a polynomial in w = -log(1 - y^2), or
// in sqrt(w) in the tails), good to about 1e-7 relative where float32 reaches (1 - |y|
// above 1e-6 here); closer to 1, from the asymptotic erfc(x) ~ e^(-x^2) / (x sqrt(pi)).
// Then three of Halley's steps on f(x) = erf(x) - |y| (cubic: to double precision). In
// the tails f is formed as (1 - |y|) - erfc(x), both exact or accurate relative to their
// size, so that y near 1 keeps its digits: at 1 - 1e-15 within 1e-16 of mpmath's (PyTorch's
// is 5e-5 off there). erfinv(+-1) = +-infinity, NaN outside [-1, 1], -0 kept.
#pragma once
#include <cmath>
#include <limits>

#ifdef __CUDACC__
#define DL_SPECIAL __host__ __device__ inline
#else
#define DL_SPECIAL inline
#endif

namespace dl::special {

constexpr double kPi = 3.14159265358979323846;

DL_SPECIAL double lgamma(double x) {
#if defined(__CUDA_ARCH__)
  return ::lgamma(x);
#elif defined(__GLIBC__) || defined(__APPLE__)
  int sign;
  return ::lgamma_r(x, &sign);
#else
  return std::lgamma(x);
#endif
}

DL_SPECIAL double digamma(double x) {
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  double acc = 0;
  if (x < 0) {
    if (x == std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
    const double frac = x - std::trunc(x);   // exact; tan(pi frac) = tan(pi x)
    acc = -kPi / std::tan(kPi * frac);
    x = 1 - x;
  }
  while (x < 10) {
    acc -= 1 / x;
    x += 1;
  }
  const double z = 1 / (x * x);
  const double series =
      z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
  return acc + std::log(x) - 0.5 / x - series;
}

// Hurwitz's zeta(s, q) = sum over k >= 0 of (q + k)^-s, for s > 1 and q > 0.
DL_SPECIAL double hurwitz_zeta_positive(double s, double q) {
  // B_2j / (2j)!, j = 1..12
  constexpr double kB[12] = {
      8.3333333333333333333e-02,  -1.3888888888888888889e-03, 3.3068783068783068783e-05,
      -8.2671957671957671958e-07, 2.0876756987868098979e-08,  -5.2841901386874931848e-10,
      1.3382536530684678833e-11,  -3.3896802963225828668e-13, 8.5860620562778445641e-15,
      -2.1748686985580618730e-16, 5.5090028283602295152e-18,  -1.3954464685812523341e-19};
  double sum = 0;
  double a = q;
  while (a < 9 || a < s) {
    const double term = std::pow(a, -s);
    sum += term;
    a += 1;
    // what is left is below (a - 1)^-s (1 + a / (s - 1)): negligible once that is
    if (a >= 9 && term * (1 + a / (s - 1)) <= 1e-17 * sum) return sum;
  }
  // Euler-Maclaurin: a^(1-s) / (s - 1) + a^-s / 2 + sum B_2j / (2j)! s (s+1) .. (s+2j-2) a^(-s-2j+1)
  const double as = std::pow(a, -s);
  double tail = a * as / (s - 1) + 0.5 * as;
  double rising = s;          // s (s + 1) ... (s + 2j - 2)
  double power = as / a;      // a^(-s - 2j + 1)
  double previous = std::numeric_limits<double>::infinity();
  for (int j = 0; j < 12; ++j) {
    const double term = kB[j] * rising * power;
    if (!(std::fabs(term) < previous)) break;   // (the asymptotic series turns)
    tail += term;
    if (std::fabs(term) < 1e-17 * std::fabs(sum + tail)) break;
    previous = std::fabs(term);
    rising *= (s + 2 * j + 1) * (s + 2 * j + 2);
    power /= a * a;
  }
  return sum + tail;
}

// zeta(s, q) for any q (s > 1): a whole q <= 0 is a pole. For q < 0, q = f - N with f in
// (0, 1) and a whole s, the terms (f - j)^-s, j = 1..N, are (-1)^s (j - f)^-s: so zeta(s,
// q) = zeta(s, f) + (-1)^s (zeta(s, 1 - f) - zeta(s, N + 1 - f)). A fractional s there
// has no real value (NaN).
DL_SPECIAL double hurwitz_zeta(double s, double q) {
  if (q <= 0 && q == std::floor(q)) return std::numeric_limits<double>::infinity();
  if (q > 0) return hurwitz_zeta_positive(s, q);
  if (s != std::floor(s)) return std::numeric_limits<double>::quiet_NaN();
  const double n = -std::floor(q), f = q + n;
  const double sign = std::fmod(s, 2.0) == 0 ? 1.0 : -1.0;
  return hurwitz_zeta_positive(s, f) +
         sign * (hurwitz_zeta_positive(s, 1 - f) - hurwitz_zeta_positive(s, n + 1 - f));
}

// zeta(x, q) as PyTorch's (Cephes'): infinite at x = 1 and at q a whole number <= 0, NaN
// for x < 1 and for q < 0 with x not whole (q^-x is not real); 0 at q = infinity.
DL_SPECIAL double zeta(double x, double q) {
  if (x != x || q != q) return x + q;
  if (x == 1) return std::numeric_limits<double>::infinity();
  if (x < 1) return std::numeric_limits<double>::quiet_NaN();
  if (q == std::numeric_limits<double>::infinity()) return 0;
  if (x == std::numeric_limits<double>::infinity()) return q > 1 ? 0 : q == 1 ? 1 : std::numeric_limits<double>::infinity();
  if (q <= 0 && q != std::floor(q) && x != std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
  return hurwitz_zeta(x, q);
}

// Note [polygamma left of 0]
// Left of 0, zeta's folding (above) subtracts two zetas of about the same size near a
// pole: at x = -1e-10 it kept 7 digits. There polygamma takes the reflection
//   psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi^(n+1) P_n(cot(pi x)),
// P_n the polynomial in c = cot y of cot's n-th derivative (P_0 = c, P_(k+1) = -(1 + c^2)
// P_k'(c): terms of one sign, no cancellation), cot taken of x less its nearest whole
// number (exact) as a quotient of sines. Orders past kReflectedOrders keep the fold
// (P_n's coefficients, about n! 2^n, pass the doubles' range before n = 150).
constexpr int kReflectedOrders = 100;

// cot's n-th derivative at y, with c = cot(y), as P_n(c).
DL_SPECIAL double cot_derivative(int n, double c) {
  double coef[kReflectedOrders + 2] = {0, 1};   // P_0 = c
  for (int k = 0; k < n; ++k) {
    double next[kReflectedOrders + 2] = {};
    for (int j = 1; j <= k + 1; ++j) {   // -(1 + c^2) j coef_j c^(j-1)
      next[j - 1] -= j * coef[j];
      next[j + 1] -= j * coef[j];
    }
    for (int j = 0; j <= k + 2; ++j) coef[j] = next[j];
  }
  double p = 0;
  for (int j = n + 1; j >= 0; --j) p = p * c + coef[j];
  return p;
}

// The n-th derivative of digamma; n a whole number (NaN below 0). 0 at +infinity (the
// limit), NaN at -infinity.
DL_SPECIAL double polygamma(double n, double x) {
  const double k = std::nearbyint(n);
  if (!(k >= 0)) return std::numeric_limits<double>::quiet_NaN();
  if (k == 0) return digamma(x);
  if (x == std::numeric_limits<double>::infinity()) return 0;
  if (x == -std::numeric_limits<double>::infinity()) return std::numeric_limits<double>::quiet_NaN();
  const double sign = std::fmod(k, 2.0) == 1 ? 1.0 : -1.0;
  if (x < 0 && x != std::floor(x) && k <= kReflectedOrders) {
    // cot(pi x) = cos(pi f) / sin(pi f), f = x less its nearest whole number (exact), the
    // cosine as sin(pi (1/2 - |f|)): exactly 0 at f = +-1/2, where cot's odd derivatives peak
    const double frac = x - std::nearbyint(x);
    const double cot = std::sin(kPi * (0.5 - std::fabs(frac))) / std::sin(kPi * frac);
    return -sign * polygamma(k, 1 - x) - std::pow(kPi, k + 1) * cot_derivative(int(k), cot);
  }
  // (in double throughout: n! is infinite past 170, and n may exceed int's range)
  double factorial = 1;
  for (double i = 2; i <= k && factorial < std::numeric_limits<double>::infinity(); ++i) factorial *= i;
  return sign * factorial * hurwitz_zeta(k + 1, x);
}

// Giles' single-precision erfinv(y) / y in w = -log(1 - y^2) (Note [erfinv]).
DL_SPECIAL double giles_erfinv(double w) {
  double p;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  return p;
}

DL_SPECIAL double erfinv(double y) {
  const double a = std::fabs(y);
  if (!(a <= 1)) return std::numeric_limits<double>::quiet_NaN();
  if (a == 1) return std::copysign(std::numeric_limits<double>::infinity(), y);
  if (a == 0) return y;
  double x;
  if (1 - a < 1e-6) {
    // the far tail, past the range Giles fitted: erfc(x) ~ e^(-x^2) / (x sqrt(pi)) = t
    // gives x^2 ~ L - log(x) with L = -log(t sqrt(pi)), and log(x) ~ log(L) / 2
    const double L = -std::log((1 - a) * 1.77245385090551602730);
    x = std::sqrt(L - 0.5 * std::log(L));
  } else {
    x = a * giles_erfinv(-std::log((1 - a) * (1 + a)));
  }
  const double two_over_sqrt_pi = 1.12837916709551257390;
  for (int i = 0; i < 3; ++i) {
    const double f = a <= 0.5 ? std::erf(x) - a : (1 - a) - std::erfc(x);
    const double d = two_over_sqrt_pi * std::exp(-x * x);   // f'(x); f'' = -2 x f'
    x -= f / (d + x * f);                                    // Halley's step
  }
  return std::copysign(x, y);
}

}  // namespace dl::special
