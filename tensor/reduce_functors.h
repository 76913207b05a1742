// Reduction math, written once for the host and the device (docs/design.md, "Kernel math written
// once").
//
//   fn::SumRed<float> r;                      // folds float32 into a double
//   fn::SumRed<float>::acc_t a = r.identity();
//   for (float v : values) a = r.step(a, v, 0.0);
//   float s = fn::convert<float>(r.finish(a, n, 0.0));
//
// A reducer has its element type `in_t`, an accumulator type `acc_t` and four members:
//   identity()          the fold's starting value (what an empty reduction starts from)
//   step(acc, x, c)     folds one element in
//   merge(a, b)         joins two partial folds, `a` covering the earlier elements
//   finish(acc, n, c)   the value stored for an output that folded n elements
// `c` is a per-output centre computed by an earlier pass: the mean for Var/Std, the
// (sanitised) max for Logsumexp. Reducers with kCentered == false ignore it. Two passes
// keep the inner loop free of the division Welford's update needs, so it vectorises,
// and are at least as accurate. Float32 data is accumulated in double and integer data
// in uint64 (wrapping like PyTorch's int64 sums instead of signed-overflow UB).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tensor/functors.h"

namespace dl::fn {

// Accumulator of sums and products: double for floats, uint64 for ints and bools.
template <typename T>
using sum_acc_t = std::conditional_t<kIsFloat<T>, double, uint64_t>;
// The dtype PyTorch gives sums and products: floats keep theirs, the rest go to int64.
template <typename T>
using sum_out_t = std::conditional_t<kIsFloat<T>, T, int64_t>;

template <typename T>
DL_HD sum_acc_t<T> to_sum_acc(T x) {
  if constexpr (kIsFloat<T>) return double(x);
  else if constexpr (std::is_same_v<T, bool>) return x ? 1u : 0u;
  else return uint64_t(int64_t(x));  // sign-extends, then wraps modulo 2^64
}
template <typename A>
DL_HD auto from_sum_acc(A a) {
  if constexpr (std::is_same_v<A, double>) return a;
  else return int64_t(a);  // modular conversion (C++20)
}

template <typename T> DL_HD T lowest_of() {
  if constexpr (kIsFloat<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <typename T> DL_HD T highest_of() {
  if constexpr (kIsFloat<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}
// max/min that let a NaN win, whichever side it is on (PyTorch's amax/amin).
template <typename T> DL_HD T nan_max(T a, T x) {
  if constexpr (kIsFloat<T>) return (x > a || x != x) ? x : a;
  else return x > a ? x : a;
}
template <typename T> DL_HD T nan_min(T a, T x) {
  if constexpr (kIsFloat<T>) return (x < a || x != x) ? x : a;
  else return x < a ? x : a;
}

template <typename T> struct SumRed {
  using acc_t = sum_acc_t<T>;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD acc_t identity() const { return acc_t(0); }
  DL_HD acc_t step(acc_t a, T x, double) const { return a + to_sum_acc(x); }
  DL_HD acc_t merge(acc_t a, acc_t b) const { return a + b; }
  DL_HD auto finish(acc_t a, int64_t, double) const { return from_sum_acc(a); }
};

template <typename T> struct ProdRed {
  using acc_t = sum_acc_t<T>;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD acc_t identity() const { return acc_t(1); }
  DL_HD acc_t step(acc_t a, T x, double) const { return a * to_sum_acc(x); }
  DL_HD acc_t merge(acc_t a, acc_t b) const { return a * b; }
  DL_HD auto finish(acc_t a, int64_t, double) const { return from_sum_acc(a); }
};

// Floating inputs only (the front end converts integers first).
template <typename T> struct MeanRed {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double) const { return a + double(x); }
  DL_HD double merge(double a, double b) const { return a + b; }
  // An empty mean is 0/0 = nan, as in PyTorch.
  DL_HD double finish(double a, int64_t n, double) const { return a / double(n); }
};

template <typename T> struct AmaxRed {
  using acc_t = T;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD T identity() const { return lowest_of<T>(); }
  DL_HD T step(T a, T x, double) const { return nan_max(a, x); }
  DL_HD T merge(T a, T b) const { return nan_max(a, b); }
  DL_HD T finish(T a, int64_t, double) const { return a; }
};

template <typename T> struct AminRed {
  using acc_t = T;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD T identity() const { return highest_of<T>(); }
  DL_HD T step(T a, T x, double) const { return nan_min(a, x); }
  DL_HD T merge(T a, T b) const { return nan_min(a, b); }
  DL_HD T finish(T a, int64_t, double) const { return a; }
};

// Sum of squared deviations from the centre (the mean), then divided by
// max(0, n - correction) as PyTorch does: n <= correction gives inf, or nan for 0/0.
template <typename T> struct VarRed {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = true;
  double correction = 1;
  bool take_sqrt = false;  // Std
  DL_HD static double center(double mean) { return mean; }
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double c) const {
    double d = double(x) - c;
    return a + d * d;
  }
  DL_HD double merge(double a, double b) const { return a + b; }
  DL_HD double finish(double a, int64_t n, double) const {
    double dof = double(n) - correction;
    double v = a / (dof > 0 ? dof : 0.0);
    return take_sqrt ? std::sqrt(v) : v;
  }
};

// log(sum(exp(x - m))) + m with m the max. An infinite max is replaced by 0 so that a
// row of -inf gives log(0) = -inf and a row holding +inf gives +inf, not inf - inf.
template <typename T> struct LogsumexpRed {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = true;
  DL_HD static double center(double max) { return std::isinf(max) ? 0.0 : max; }
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double c) const { return a + double(std::exp(T(x - T(c)))); }
  DL_HD double merge(double a, double b) const { return a + b; }
  DL_HD double finish(double a, int64_t, double c) const { return std::log(a) + c; }
};

// ---- vector norms (floating inputs) ----
template <typename T> struct Norm2Red {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double) const { return a + double(x) * double(x); }
  DL_HD double merge(double a, double b) const { return a + b; }
  DL_HD double finish(double a, int64_t, double) const { return std::sqrt(a); }
};
template <typename T> struct Norm1Red {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double) const { return a + double(std::fabs(x)); }
  DL_HD double merge(double a, double b) const { return a + b; }
  DL_HD double finish(double a, int64_t, double) const { return a; }
};
// The "0-norm": the count of non-zero elements (a NaN counts).
template <typename T> struct Norm0Red {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double) const { return a + (x != T(0) ? 1.0 : 0.0); }
  DL_HD double merge(double a, double b) const { return a + b; }
  DL_HD double finish(double a, int64_t, double) const { return a; }
};
template <typename T> struct NormPRed {
  using acc_t = double;
  using in_t = T;
  static constexpr bool kCentered = false;
  double p = 2;
  DL_HD double identity() const { return 0; }
  DL_HD double step(double a, T x, double) const { return a + std::pow(std::fabs(double(x)), p); }
  DL_HD double merge(double a, double b) const { return a + b; }
  DL_HD double finish(double a, int64_t, double) const { return std::pow(a, 1.0 / p); }
};
// max |x| (p = inf) and min |x| (p = -inf); empty reductions are refused by the front end.
template <typename T> struct NormInfRed {
  using acc_t = T;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD T identity() const { return T(0); }
  DL_HD T step(T a, T x, double) const { return nan_max(a, T(std::fabs(x))); }
  DL_HD T merge(T a, T b) const { return nan_max(a, b); }
  DL_HD T finish(T a, int64_t, double) const { return a; }
};
template <typename T> struct NormNegInfRed {
  using acc_t = T;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD T identity() const { return std::numeric_limits<T>::infinity(); }
  DL_HD T step(T a, T x, double) const { return nan_min(a, T(std::fabs(x))); }
  DL_HD T merge(T a, T b) const { return nan_min(a, b); }
  DL_HD T finish(T a, int64_t, double) const { return a; }
};

// ---- logical ----
// The flag is kept in a uint32 rather than a bool: bool lanes defeat the vectoriser.
template <typename T> struct AnyRed {
  using acc_t = uint32_t;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD uint32_t identity() const { return 0; }
  DL_HD uint32_t step(uint32_t a, T x, double) const { return a | uint32_t(x != T(0)); }
  DL_HD uint32_t merge(uint32_t a, uint32_t b) const { return a | b; }
  DL_HD bool finish(uint32_t a, int64_t, double) const { return a != 0; }
};
template <typename T> struct AllRed {
  using acc_t = uint32_t;
  using in_t = T;
  static constexpr bool kCentered = false;
  DL_HD uint32_t identity() const { return 1; }
  DL_HD uint32_t step(uint32_t a, T x, double) const { return a & uint32_t(x != T(0)); }
  DL_HD uint32_t merge(uint32_t a, uint32_t b) const { return a & b; }
  DL_HD bool finish(uint32_t a, int64_t, double) const { return a != 0; }
};

// ---- max/min with their index (max_dim, argmax) ----
// Whether `x` replaces the current best: strictly better, so ties keep the first
// occurrence; the first NaN wins and is never replaced (PyTorch's rule).
template <typename T, bool IsMax> struct ArgBetter {
  DL_HD bool operator()(T x, T best) const {
    if constexpr (kIsFloat<T>) {
      if (best != best) return false;
      if (x != x) return true;
    }
    if constexpr (IsMax) return x > best; else return x < best;
  }
};

// ---- log_softmax over a row, given the row's max m and log_s = log(sum(exp(x - m))) ----
// (softmax itself is exp(x - m) scaled by 1 / sum: the sum is a SumRed fold of the
// exponentials, kept in the output so that each element is exponentiated once.)
struct LogSoftmaxOutFn {
  template <typename T> DL_HD T operator()(T x, T m, T log_s) const { return (x - m) - log_s; }
};

// The running fold of the scans (cumsum, cumprod) on every backend. Integer scans wrap
// around, as integer + and * do (wrap_t in functors.h): their int64 accumulator may
// overflow, which is undefined behaviour for a signed type.
struct ScanStep {
  bool prod = false;
  template <typename A>
  DL_HD A init() const { return A(prod ? 1 : 0); }
  template <typename A>
  DL_HD A operator()(A acc, A v) const {
    using W = wrap_t<A>;
    return prod ? A(W(acc) * W(v)) : A(W(acc) + W(v));
  }
};

}  // namespace dl::fn
