// Bessel functions of orders 0 and 1 in double, for the functors of tensor/functors.h on
// the host and the device alike (float32 calls them in double and rounds once).
//
// Note [Bessel functions]
// Every function is computed from three expansions, each where it converges fast and
// without cancellation, so that no table of fitted coefficients is needed:
//   - the power series about 0 (bessel_series below): I_n for |x| <= 20 (positive terms),
//     J_n and Y_n for x <= 2, K_n for x <= 1 (Y_n and K_n by their logarithmic series,
//     Abramowitz and Stegun 9.1.11 and 9.6.11, whose psi sums ride along with J_n's and
//     I_n's);
//   - the asymptotic series in 1/x (Hankel's for J_n and Y_n, x > 25; those of e^-x I_n
//     and e^x K_n, x > 20), summed up to their smallest term, which is about e^-2x;
//   - between, J_n by Miller's backward recurrence J_(k-1) = (2k / x) J_k - J_(k+1) from
//     k = N (where J_N is negligible), normalised by J_0 + 2 (J_2 + J_4 + ...) = 1, with
//     Y_0 and Y_1 from the Neumann series of the same J_k; and e^x K_n(x) as the integral
//     of exp(-2x sinh^2(t/2)) cosh(nt) over t >= 0, by the trapezoidal rule at a step of
//     0.1 (exponentially accurate for such an integrand, which decays double-exponentially
//     and is analytic in a strip).
// Against mpmath at 40 digits over x in [1e-4, 1e3] the error is below 1.2e-15 of the
// value (of the envelope sqrt(2 / (pi x)) for the oscillating J and Y: near their zeros
// the error is absolute). The limits are the mathematical ones: I_n(+-inf) = +-inf, J_n and
// Y_n(inf) = 0 (PyTorch 1.13 gives NaN for these), Y_n(0) = -inf, K_n(0) = inf, and Y_n
// and K_n are NaN below 0.
#pragma once
#include <cmath>
#include <limits>

#include "tensor/special.h"

namespace dl::special {

constexpr double kEulerGamma = 0.57721566490153286061;

// With q = sigma x^2 / 4: regular = (x/2)^n sum q^k / (k! (n+k)!), which is I_n for sigma =
// 1 and J_n for sigma = -1, and psi = (x/2)^n sum (psi(k+1) + psi(n+k+1)) q^k / (k! (n+k)!),
// the sum of the logarithmic series of K_n and Y_n. n is 0 or 1.
struct BesselSeries {
  double regular, psi;
};
DL_SPECIAL BesselSeries bessel_series(int n, double x, double sigma) {
  const double q = sigma * x * x / 4;
  double t = n == 0 ? 1.0 : x / 2;                                 // the k-th term
  double p = n == 0 ? -2 * kEulerGamma : 1 - 2 * kEulerGamma;      // psi(k+1) + psi(n+k+1)
  BesselSeries s{t, t * p};
  for (int k = 1; k < 200; ++k) {
    t *= q / (k * double(n + k));
    p += 1.0 / k + 1.0 / (n + k);
    s.regular += t;
    s.psi += t * p;
    if (std::fabs(t) * (1 + std::fabs(p)) <= 1e-17 * std::fabs(s.regular)) break;
  }
  return s;
}

// sum a_k(n) (sign / x)^k over k >= 0, a_k(n) = prod over j <= k of (4n^2 - (2j-1)^2) /
// (8j), stopped at its smallest term: e^-x I_n(x) sqrt(2 pi x) for sign = -1, e^x K_n(x)
// sqrt(2x / pi) for sign = 1.
DL_SPECIAL double bessel_asymptotic(int n, double x, double sign) {
  const double mu = 4.0 * n * n;
  double t = 1, s = 1;
  for (int k = 1; k < 200; ++k) {
    const double next = t * sign * (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
    if (!(std::fabs(next) < std::fabs(t))) break;
    t = next;
    s += t;
    if (std::fabs(t) <= 1e-17 * std::fabs(s)) break;
  }
  return s;
}

// e^-|x| I_n(|x|), n = 0 or 1 (the caller gives I_1 its sign).
DL_SPECIAL double bessel_ie_abs(int n, double a) {
  if (a <= 20) return bessel_series(n, a, 1).regular * std::exp(-a);
  return bessel_asymptotic(n, a, -1) / std::sqrt(2 * kPi * a);
}

DL_SPECIAL double bessel_i0e(double x) { return bessel_ie_abs(0, std::fabs(x)); }
DL_SPECIAL double bessel_i1e(double x) { return std::copysign(bessel_ie_abs(1, std::fabs(x)), x); }

// e^|x| times the scaled value, halved twice so that I_n is finite up to its own overflow
// (about 713.9) although e^x overflows from 709.8.
DL_SPECIAL double bessel_unscale(double scaled, double a) {
  if (std::isinf(a)) return std::numeric_limits<double>::infinity();
  const double h = std::exp(a / 2);
  return h * (scaled * h);
}
DL_SPECIAL double bessel_i0(double x) {
  const double a = std::fabs(x);
  if (a <= 20) return bessel_series(0, a, 1).regular;
  return bessel_unscale(bessel_i0e(a), a);
}
DL_SPECIAL double bessel_i1(double x) {
  const double a = std::fabs(x);
  if (a <= 20) return std::copysign(bessel_series(1, a, 1).regular, x);
  return std::copysign(bessel_unscale(bessel_i1e(a), a), x);
}

// e^x K_n(x) for x > 0, n = 0 or 1.
DL_SPECIAL double bessel_ke(int n, double x) {
  if (x <= 1) {
    const BesselSeries s = bessel_series(n, x, 1);
    const double l = std::log(x / 2);
    const double k = n == 0 ? -l * s.regular + 0.5 * s.psi : 1 / x + l * s.regular - 0.5 * s.psi;
    return k * std::exp(x);
  }
  if (x > 20) return bessel_asymptotic(n, x, 1) * std::sqrt(kPi / (2 * x));
  const double h = 0.1;
  double s = 0.5;   // the half weight of t = 0
  for (int i = 1; i < 1000; ++i) {
    const double t = i * h, sh = std::sinh(t / 2);
    const double f = std::exp(-2 * x * sh * sh) * (n == 0 ? 1.0 : std::cosh(t));
    s += f;
    if (f <= 1e-18 * s) break;
  }
  return s * h;
}
DL_SPECIAL double bessel_k_scaled(int n, double x) {
  if (std::isnan(x)) return x;
  if (x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return std::numeric_limits<double>::infinity();
  if (std::isinf(x)) return 0;
  return bessel_ke(n, x);
}
DL_SPECIAL double bessel_k(int n, double x) {
  if (!(x > 0) || std::isinf(x)) return bessel_k_scaled(n, x);
  return bessel_ke(n, x) * std::exp(-x);
}

// J_n(x) and Y_n(x) for x > 0, n = 0 or 1.
struct BesselJY {
  double j, y;
};
DL_SPECIAL BesselJY bessel_jy_positive(int n, double x) {
  constexpr double two_over_pi = 2 / kPi;
  if (x <= 2) {
    const BesselSeries s = bessel_series(n, x, -1);
    const double l = std::log(x / 2);
    const double y = n == 0 ? two_over_pi * l * s.regular - s.psi / kPi
                            : -two_over_pi / x + two_over_pi * l * s.regular - s.psi / kPi;
    return {s.regular, y};
  }
  if (x > 25) {
    // Hankel: sqrt(2 / (pi x)) (P cos chi - Q sin chi) and (P sin chi + Q cos chi), chi =
    // x - (2n + 1) pi / 4, P and Q the even and odd terms of sum (-1)^.. a_k(n) / x^k.
    const double mu = 4.0 * n * n;
    double t = 1, p = 1, q = 0;
    for (int k = 1; k < 200; ++k) {
      const double next = t * (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
      if (!(std::fabs(next) < std::fabs(t))) break;
      t = next;
      const double signed_t = (k / 2) % 2 == 0 ? t : -t;   // (-1)^floor(k/2)
      if (k % 2 == 0) p += signed_t;
      else q += signed_t;
      if (std::fabs(t) <= 1e-17) break;
    }
    // cos and sin of chi from those of x (exact for any x), not of x - pi/4 rounded
    const double c = std::cos(x), s = std::sin(x), r = 0.70710678118654752440;
    const double cc = n == 0 ? (c + s) * r : (s - c) * r;
    const double sc = n == 0 ? (s - c) * r : -(s + c) * r;
    const double f = std::sqrt(two_over_pi / x);
    return {f * (p * cc - q * sc), f * (p * sc + q * cc)};
  }
  // Miller: J_k from k = N down, unnormalised, with the sums that normalise it and that
  // make Y_0 = (2/pi)(ln(x/2) + gamma) J_0 - (4/pi) sum_m (-1)^m J_2m / m and
  // Y_1 = (2/pi)((ln(x/2) + gamma) J_1 - J_0 / x) + (2/pi) sum_m (-1)^m (J_2m-1 - J_2m+1) / m,
  // the latter gathered by k as -J_1 + sum_m (-1)^(m+1) (1/m + 1/(m+1)) J_2m+1.
  const int big = 2 * int((x + 25 + 6 * std::cbrt(x)) / 2);
  double above = 0, jk = 1e-30, norm = 0, s0 = 0, s1 = 0, j1 = 0;
  for (int k = big; k >= 0; --k) {
    const int m = k / 2;
    if (k % 2 == 0) {
      norm += k == 0 ? jk : 2 * jk;
      if (k > 0) s0 += (m % 2 == 0 ? jk : -jk) / m;
    } else if (k == 1) {
      j1 = jk;
      s1 -= jk;
    } else {
      s1 += (m % 2 == 1 ? jk : -jk) * (1.0 / m + 1.0 / (m + 1));
    }
    if (k == 0) break;
    const double below = (2.0 * k / x) * jk - above;
    above = jk;
    jk = below;
    if (std::fabs(jk) > 1e250) {
      jk *= 1e-250;
      above *= 1e-250;
      norm *= 1e-250;
      s0 *= 1e-250;
      s1 *= 1e-250;
      j1 *= 1e-250;
    }
  }
  const double j0 = jk / norm, l = std::log(x / 2) + kEulerGamma;
  if (n == 0) return {j0, two_over_pi * l * j0 - 2 * two_over_pi * s0 / norm};
  const double jn = j1 / norm;
  return {jn, two_over_pi * (l * jn - j0 / x) + two_over_pi * s1 / norm};
}

DL_SPECIAL double bessel_j(int n, double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return 0;
  if (x == 0) return n == 0 ? 1.0 : x;
  const double v = bessel_jy_positive(n, std::fabs(x)).j;
  return n == 1 && x < 0 ? -v : v;   // J_0 even, J_1 odd
}
DL_SPECIAL double bessel_y(int n, double x) {
  if (std::isnan(x)) return x;
  if (x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<double>::infinity();
  if (std::isinf(x)) return 0;
  return bessel_jy_positive(n, x).y;
}

// sin(x) / x, 1 at 0 and 0 at +-infinity.
DL_SPECIAL double spherical_bessel_j0(double x) {
  if (std::isinf(x)) return 0;
  if (std::fabs(x) < 1e-4) return 1 - x * x / 6;   // (the next term is below 1e-17)
  return std::sin(x) / x;
}

}  // namespace dl::special
