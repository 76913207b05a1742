// The incomplete gamma function and the slope of a Gamma draw, in double, for the
// functors of igamma, igammac and _standard_gamma_log_grad (tensor/functors.h) on the
// host and the device alike.
//
// Note [Incomplete gamma]
// P(a, x) = gamma(a, x) / Gamma(a) (igamma, torch.special.gammainc) and Q = 1 - P
// (igammac, gammaincc), as Cephes' igam and igamc, which PyTorch's are: left of
// max(1, a) P's series e^-x x^a / Gamma(a + 1) sum_n x^n / ((a + 1) ... (a + n)), all
// terms positive; right of it Q's continued fraction (Legendre's, evaluated by the
// modified Lentz method); the other of the pair is 1 minus it. The factor
// x^a e^-x / Gamma(a) is formed in logarithms; from a = 20 as
//   a (log1p(d) - d) + log(a) / 2 - log(2 pi) / 2 - S(a),   d = (x - a) / a
// (a log(x / a) + a - x for the first term where x is far from a),
// S Stirling's remainder lgamma(a) - (a - 1/2) log a + a - log(2 pi) / 2, so that the
// two large terms a log x and lgamma(a) do not cancel (at a = 1e4 their difference would
// keep eleven digits). Both sums run until a term is below 1e-17 of the total, at most
// 100,000 terms (about sqrt(a) times a few are needed where x is near a: from a = 1e6,
// within 0.3 a of x, Temme's expansion below takes over). Edges as
// PyTorch's: NaN for a or x negative or NaN, and for a = x = 0; P(0, x > 0) = 1; P(a, 0)
// = 0; P(a, inf) = 1; P(inf, x) = 0 for finite x, NaN at x = inf.
//
// Note [Gamma draws' slopes]
// A Gamma(alpha, 1) draw x = F^-1(u; alpha) moves with alpha while the uniform u behind
// it stays: dx/dalpha = -(dP/dalpha)(alpha, x) / p(x; alpha), p the density (implicit
// reparameterisation, as PyTorch's rsample; its derivative is an approximation of this,
// good to about 1e-3). gamma_draw_log_slope gives dlog(x)/dalpha from log x (a small
// alpha's draws underflow as x, not as log x). From P's series
// e^-x sum_n x^(alpha + n) / Gamma(alpha + n + 1):
//   dlog(x)/dalpha = sum_n q_n (psi(alpha + n + 1) - log x),
//   q_0 = 1 / alpha,  q_n = q_(n-1) x / (alpha + n)
// until the terms are negligible (about x + a few sqrt(x) of them). Right of alpha + 1
// its terms grow as P / p, past the doubles far out (and cancel before): there the upper
// gamma Q = p x C, whose continued fraction
//   C = 1 / (b_0 - 1 (1 - alpha) / (b_1 - 2 (2 - alpha) / (b_2 - ...))),  b_k = x + 1 - alpha + 2 k,
// gives dlog(x)/dalpha = C (log x - psi(alpha)) + dC/dalpha, the fraction and its
// derivative carried by the recurrences of its convergents (exact to 1e-9 both). Left of
// alpha + 1 from alpha = 1000 (the series' terms grow with x), and where the fraction
// has not settled, Wilson and Hilferty's normal cube root x = alpha (1 - 1/(9 alpha) +
// z / (3 sqrt(alpha)))^3, z fixed, costs one step: within 1e-5 of the slope down to
// z = -3 and 1e-4 to z = -6 (at alpha = 1000; closer for larger alpha).
#pragma once
#include <cmath>
#include <limits>

#include "tensor/special.h"

namespace dl::special {

// log(x^a e^-x / Gamma(a)), Note [Incomplete gamma]; a > 0, x > 0.
DL_SPECIAL double gamma_log_factor(double a, double x) {
  if (a < 20) return a * std::log(x) - x - lgamma(a);
  const double d = (x - a) / a;
  const double z = 1 / (a * a);
  const double stirling = (1.0 / 12 - z * (1.0 / 360 - z * (1.0 / 1260 - z * (1.0 / 1680 - z / 1188)))) / a;
  // (log1p of d where x - a is exact, near a; log(x / a) keeps the digits far from it)
  const double main = std::fabs(d) < 0.5 ? a * (std::log1p(d) - d) : a * std::log(x / a) + (a - x);
  return main + 0.5 * std::log(a) - 0.91893853320467274178 - stirling;
}

constexpr int kIncompleteGammaTerms = 100000;

// P's series (x <= max(1, a)).
DL_SPECIAL double lower_gamma_series(double a, double x) {
  double term = 1, sum = 1;
  for (int n = 1; n < kIncompleteGammaTerms; ++n) {
    term *= x / (a + n);
    sum += term;
    if (term <= sum * 1e-17) break;
  }
  return std::exp(gamma_log_factor(a, x)) * sum / a;
}

// Q's continued fraction (x > max(1, a)): Q = factor / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)).
DL_SPECIAL double upper_gamma_fraction(double a, double x) {
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a;
  double c = 1 / kTiny, d = 1 / b, f = d;
  for (int k = 1; k < kIncompleteGammaTerms; ++k) {
    const double an = -k * (k - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    f *= delta;
    if (std::fabs(delta - 1) <= 1e-16) break;
  }
  return std::exp(gamma_log_factor(a, x)) * f;
}

// Q(a, x) for a huge a near x = a, where the sums would need many times sqrt(a) terms:
// Temme's uniform expansion (DLMF 8.12.3-8.12.9) to its second term,
//   Q = erfc(eta sqrt(a / 2)) / 2 + e^(-a eta^2 / 2) / sqrt(2 pi a) (C_0(eta) + C_1(eta) / a),
//   eta^2 / 2 = lambda - 1 - log(lambda),  lambda = x / a,  eta of lambda - 1's sign,
// C_0 = 1 / (lambda - 1) - 1 / eta, C_1 = 1 / eta^3 - 1 / (lambda - 1)^3 - 1 / (lambda - 1)^2
// - 1 / (12 (lambda - 1)), by their Taylor series where those cancel (|eta| < 1e-3).
// From a = 1e6 the next term is below 1e-18 of Q's size.
DL_SPECIAL double upper_gamma_temme(double a, double x) {
  const double lm1 = (x - a) / a;
  const double eta = std::copysign(std::sqrt(2 * (lm1 - std::log1p(lm1))), lm1);
  double c0, c1;
  if (std::fabs(eta) < 1e-3) {
    c0 = -1.0 / 3 + eta * (1.0 / 12 + eta * (-2.0 / 135 + eta * (1.0 / 864 + eta / 2835)));
    c1 = -1.0 / 540 + eta * (-1.0 / 288 + eta / 378);
  } else {
    c0 = 1 / lm1 - 1 / eta;
    c1 = 1 / (eta * eta * eta) - 1 / (lm1 * lm1 * lm1) - 1 / (lm1 * lm1) - 1 / (12 * lm1);
  }
  const double front = std::exp(-a * eta * eta / 2) / std::sqrt(2 * kPi * a);
  return 0.5 * std::erfc(eta * std::sqrt(a / 2)) + front * (c0 + c1 / a);
}
// Where Temme's expansion is used instead of the sums.
DL_SPECIAL bool temme_region(double a, double x) { return a > 1e6 && std::fabs(x - a) < 0.3 * a; }

// The edges both share; returns true with P in *p where one applies.
DL_SPECIAL bool incomplete_gamma_edge(double a, double x, double* p) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!(a >= 0) || !(x >= 0) || (a == 0 && x == 0)) { *p = kNaN; return true; }
  if (a == 0) { *p = 1; return true; }
  if (x == 0) { *p = 0; return true; }
  if (a == kInf) { *p = x == kInf ? kNaN : 0; return true; }
  if (x == kInf) { *p = 1; return true; }
  return false;
}

DL_SPECIAL double igamma(double a, double x) {
  double p;
  if (incomplete_gamma_edge(a, x, &p)) return p;
  if (temme_region(a, x)) return 1 - upper_gamma_temme(a, x);
  if (x > 1 && x > a) return 1 - upper_gamma_fraction(a, x);
  return std::fmin(1.0, lower_gamma_series(a, x));   // (a denormal a's factor loses its digits)
}

DL_SPECIAL double igammac(double a, double x) {
  double p;
  if (incomplete_gamma_edge(a, x, &p)) return p != p ? p : 1 - p;
  if (temme_region(a, x)) return upper_gamma_temme(a, x);
  if (x >= 1 && x >= a) return upper_gamma_fraction(a, x);
  return std::fmax(0.0, 1 - lower_gamma_series(a, x));
}

// dlog(x)/dalpha of a Gamma(alpha, 1) draw x, from lx = log x (Note [Gamma draws' slopes]).
DL_SPECIAL double gamma_draw_log_slope(double alpha, double lx) {
  constexpr int kSeriesTerms = 4000, kFractionTerms = 2000;
  const double x = std::exp(lx);
  const bool odd = alpha != alpha || lx >= std::numeric_limits<double>::infinity();
  bool big = alpha >= 1000 || odd;
  const bool right = !odd && x > alpha + 1;
  double slope = 0;
  if (right && x > 1e100) {
    // (the fraction is b_0 to the doubles' precision, and its convergents overflow)
    const double b = x + 1 - alpha;
    slope = (lx - digamma(alpha)) / b + 1 / (b * b);
    big = false;
  } else if (right) {
    // G = b_0 + a_1 / (b_1 + ...), a_k = -k (k - alpha), from A_k = b_k A_(k-1) + a_k
    // A_(k-2) (B likewise) and their derivatives in alpha (da_k = k, db_k = -1), rescaled by B_k
    double b = x + 1 - alpha;
    double A0 = 1, B0 = 0, dA0 = 0, dB0 = 0, A1 = b, dA1 = -1, dB1 = 0;
    double G = b, last = b, dG = -1;
    for (int k = 1; k <= kFractionTerms; ++k) {
      const double ak = (alpha - k) * k;
      b += 2;
      const double A2 = b * A1 + ak * A0, B2 = b + ak * B0;   // (B1 is 1 after each rescaling)
      const double dA2 = -A1 + b * dA1 + A0 * k + ak * dA0;
      const double dB2 = -1 + b * dB1 + B0 * k + ak * dB0;
      const double s = 1 / B2;
      A0 = A1 * s, B0 = s, dA0 = dA1 * s, dB0 = dB1 * s;
      A1 = A2 * s, dA1 = dA2 * s, dB1 = dB2 * s;
      last = G, G = A1;
      // (both settled: at a whole alpha = k the fraction ends, a_k = 0, but not its slope)
      const double dlast = dG;
      dG = dA1 - G * dB1;
      if ((std::fabs(G - last) <= std::fabs(G) * 1e-16 && std::fabs(dG - dlast) <= std::fabs(dG) * 1e-16) || G != G) break;
    }
    const double C = 1 / G;
    slope = C * (lx - digamma(alpha)) - dG * C * C;
    // (a fraction that has not settled, near the middle of a huge alpha, leaves it to the cube root)
    if (std::fabs(G - last) <= std::fabs(G) * 1e-14) big = false;
  } else if (!big) {
    double q = 1 / alpha;
    double psi = digamma(alpha) + q;   // psi(alpha + 1)
    slope = q * (psi - lx);
    for (int n = 1; n <= kSeriesTerms; ++n) {
      const double j = alpha + n;
      q *= x / j;
      psi += 1 / j;
      slope += q * (psi - lx);
      if ((q <= std::fabs(slope) * 1e-17 + 1e-300 && x < j) || slope != slope) break;
    }
  }
  if (big) {
    const double t = std::cbrt(x / alpha);
    const double root = std::sqrt(alpha);
    const double z = (t - 1 + 1 / (alpha * 9)) * root * 3;
    slope = (t * t * t + t * t * (1 / (alpha * 3) - z / (root * 2))) / x;
  }
  return slope;
}

}  // namespace dl::special
