#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/ops.h"
#include "tensor/small_sizes.h"

using namespace dl;

TEST_CASE("add broadcasts and promotes", "[pointwise]") {
  double av[] = {1, 2, 3, 4, 5, 6};
  Tensor a = from_values(av, 6, Shape{2, 3}, DType::Int32);
  double bv[] = {0.5, 1.5, 2.5};
  Tensor b = from_values(bv, 3, Shape{3}, DType::Float32);
  Tensor c = binary(Op::Add, a, b);
  REQUIRE(c.dtype() == DType::Float32);
  REQUIRE(c.shape() == Shape{2, 3});
  int64_t idx[] = {1, 2};
  REQUIRE(c.value_at(idx) == 8.5);
}

TEST_CASE("integer arithmetic wraps around as two's complement", "[pointwise]") {
  // (signed overflow was undefined behaviour in the kernels: tests/fuzz, fuzz_ops)
  const int32_t imax = std::numeric_limits<int32_t>::max(), imin = std::numeric_limits<int32_t>::min();
  double v32[] = {double(imax), double(imin), -7};
  Tensor a = from_values(v32, 3, Shape{3}, DType::Int32);
  auto at = [](const Tensor& t, int64_t i) { return t.value_at(&i); };
  Tensor s = binary(Op::Add, a, Scalar::integer(256));
  CHECK(at(s, 0) == double(imin + 255));
  CHECK(at(binary(Op::Sub, a, Scalar::integer(1)), 1) == double(imax));
  CHECK(at(binary(Op::Mul, a, Scalar::integer(2)), 0) == -2);
  CHECK(at(unary(Op::Neg, a), 1) == double(imin));
  CHECK(at(unary(Op::Abs, a), 1) == double(imin));
  CHECK(at(unary(Op::Abs, a), 2) == 7);
  const int64_t lmax = std::numeric_limits<int64_t>::max();
  Tensor l = full(Shape{1}, Scalar::integer(lmax), DType::Int64);
  CHECK(at(binary(Op::Add, l, l), 0) == -2);
  double u8[] = {250, 3};
  Tensor u = from_values(u8, 2, Shape{2}, DType::UInt8);
  CHECK(at(binary(Op::Add, u, Scalar::integer(10)), 0) == 4);
  CHECK(at(binary(Op::Mul, u, Scalar::integer(2)), 0) == 244);
}

TEST_CASE("where and masked_fill take every operand layout", "[pointwise]") {
  // Dense runs, a broadcast number on either side (masked_fill's), and strided
  // operands each have their own loop in the kernel (tensor/cpu/loops.h).
  const int64_t n = 37;  // not a multiple of any vector width
  std::vector<double> cv(n), av(n), bv(n);
  for (int64_t i = 0; i < n; ++i) {
    cv[size_t(i)] = (i * 7) % 3 == 0;
    av[size_t(i)] = double(i) + 0.5;
    bv[size_t(i)] = -double(i) - 0.25;
  }
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    Tensor c = from_values(cv.data(), n, Shape{n}, DType::Bool);
    Tensor a = from_values(av.data(), n, Shape{n}, dt), b = from_values(bv.data(), n, Shape{n}, dt);
    Tensor seven = full(Shape{}, Scalar(7.0), dt);
    auto at = [](const Tensor& t, int64_t i) { return t.value_at(&i); };
    Tensor both = where(c, a, b), left = where(c, seven, b), right = where(c, a, seven);
    Tensor filled = masked_fill(b, c, Scalar(7.0));
    Tensor spread = masked_fill(expand(full(Shape{1}, Scalar(3.0), dt), Shape{n}), c, Scalar(7.0));
    // every other element, through strided views of out-of-place copies
    Tensor c2 = slice(from_values(cv.data(), n, Shape{n}, DType::Bool), 0, 0, n, 2);
    Tensor strided = where(c2, slice(a, 0, 0, n, 2), slice(b, 0, 0, n, 2));
    for (int64_t i = 0; i < n; ++i) {
      const bool ci = cv[size_t(i)] != 0;
      CHECK(at(both, i) == at(ci ? a : b, i));
      CHECK(at(left, i) == (ci ? 7.0 : at(b, i)));
      CHECK(at(right, i) == (ci ? at(a, i) : 7.0));
      CHECK(at(filled, i) == (ci ? 7.0 : at(b, i)));
      CHECK(at(spread, i) == (ci ? 7.0 : 3.0));
      if (i % 2 == 0) CHECK(at(strided, i / 2) == at(ci ? a : b, i));
    }
  }
}

TEST_CASE("a bool tensor casts to every dtype as 0 and 1, in any layout", "[pointwise]") {
  // The cast reads the bools as bytes (tensor/cpu/pointwise.cpp's copy): dense, strided
  // and broadcast sources, every output dtype.
  Tensor x = randn(Shape{37, 29}, DType::Float32);
  Tensor m = compare(Op::Gt, x, Scalar(0.0));
  REQUIRE(m.dtype() == DType::Bool);
  const Tensor sources[] = {m, transpose(m, 0, 1), expand(narrow(m, 0, 0, 1), Shape{37, 29})};
  for (const Tensor& src : sources)
    for (DType dt : {DType::Bool, DType::UInt8, DType::Int32, DType::Int64, DType::Float32, DType::Float64}) {
      INFO(dtype_name(dt) << ", source strides " << src.stride(0) << ", " << src.stride(1));
      Tensor c = cast(src, dt, true);
      REQUIRE(c.shape() == src.shape());
      int64_t bad = -1;
      int64_t idx[2];
      for (idx[0] = 0; idx[0] < src.size(0) && bad < 0; ++idx[0])
        for (idx[1] = 0; idx[1] < src.size(1) && bad < 0; ++idx[1])
          if (c.value_at(idx) != (src.value_at(idx) != 0 ? 1.0 : 0.0)) bad = idx[0] * src.size(1) + idx[1];
      CHECK(bad == -1);
    }
}

// Note [Small dense operands] and Note [Dense operands in wide loops] (tensor/cpu/
// pointwise.cpp): an op on dense operands runs dl::small's loops (small ones built for
// AVX2, larger ones in blocks built for AVX2 and AVX-512 too), anything else the general
// loops; the two must agree to the bit. Every pointwise op, in float32 and float64, on
// dense operands against the same values seen through strided views (every other
// element of a buffer twice as long). Dense operands of one shape take dl::small's loop
// in the front end (Note [Small same-shape ops] in tensor/pointwise.cpp), dense ones
// beside a one-element one in the cpu backend. First exp, tanh and sigmoid, whose
// polynomials use the vector width most, at their special values.
TEST_CASE("the wide loops of exp, tanh and sigmoid compute the general loop's bits", "[pointwise]") {
  const int64_t n = 3001;
  std::vector<double> v(2 * n);
  const double special[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(), -0.0, 0.0, 88.7, -103.9, 1e-30};
  for (int64_t i = 0; i < 2 * n; ++i)
    v[size_t(i)] = i / 2 < 8 ? special[i / 2] : -120.0 + 240.0 * double((i / 2) * 7919 % n) / double(n);
  Tensor A = slice(from_values(v.data(), 2 * n, Shape{2 * n}, DType::Float32), 0, 0, 2 * n, 2);
  Tensor a = contiguous(A);
  REQUIRE(a.numel() > sizes::kSmallElements);
  for (Op op : {Op::Exp, Op::Tanh, Op::Sigmoid}) {
    INFO(op_info(op).lua_name);
    Tensor dense = unary(op, a), strided = unary(op, A);
    bool same = true;
    for (int64_t i = 0; i < n && same; ++i) {
      const float p = dense.data<float>()[i];
      const float q = float(strided.value_at(&i));
      same = std::memcmp(&p, &q, sizeof p) == 0;
      if (!same) INFO("element " << i << ": " << p << " vs " << q);
    }
    CHECK(same);
  }
}

TEST_CASE("dense operands, small and large, compute the general loops' bits", "[pointwise]") {
  // Neither size a multiple of any vector width; the second larger than dl::small's.
  for (const int64_t n : {int64_t(37), sizes::kSmallElements * 3 + 5}) {
    INFO(n << " elements");
    const double vals[] = {-2.5, -1, -0.5, -0.0, 0, 0.25, 0.5, 1, 1.5, 2, 3, 7.5, 1e-3, -1e3,
                           std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()};
    std::vector<double> av(2 * n), bv(2 * n);
    for (int64_t i = 0; i < 2 * n; ++i) {
      av[size_t(i)] = vals[(i / 2) % 16];
      bv[size_t(i)] = vals[(i / 2 * 7 + 3) % 16];
    }
    auto bits_equal = [](const Tensor& x, const Tensor& y) {
      if (x.shape() != y.shape() || x.dtype() != y.dtype()) return false;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double p = x.value_at(&i), q = y.value_at(&i);
        if (!(p == q || (p != p && q != q)) || std::signbit(p) != std::signbit(q)) return false;
      }
      return true;
    };
    int cases = 0;
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor A = slice(from_values(av.data(), 2 * n, Shape{2 * n}, dt), 0, 0, 2 * n, 2);  // strided
      Tensor B = slice(from_values(bv.data(), 2 * n, Shape{2 * n}, dt), 0, 0, 2 * n, 2);
      Tensor a = contiguous(A), b = contiguous(B);  // the same values, dense
      REQUIRE((!A.is_contiguous() && a.is_contiguous()));
      Tensor s0 = full(Shape{}, Scalar(1.5), dt), s1 = full(Shape{1}, Scalar(-0.5), dt);
      for (int k = 0; k < kNumOps; ++k) {
        const Op op = static_cast<Op>(k);
        const OpInfo& info = op_info(op);
        INFO(dtype_name(dt) << " " << info.lua_name);
        if (info.flags & kIntOnly) continue;   // (floats refused)
        if (info.family == OpFamily::Unary) {
          CHECK(bits_equal(unary(op, a), unary(op, A)));
          ++cases;
        } else if (info.family == OpFamily::Binary || info.family == OpFamily::Compare) {
          const bool cmp = info.family == OpFamily::Compare;
          auto f = [&](const Tensor& x, const Tensor& y) { return cmp ? compare(op, x, y) : binary(op, x, y); };
          auto fs = [&](const Tensor& x, double v, bool first) {
            return cmp ? compare(op, x, Scalar(v), first) : binary(op, x, Scalar(v), first);
          };
          CHECK(bits_equal(f(a, b), f(A, B)));
          CHECK(bits_equal(f(a, s0), f(A, s0)));
          CHECK(bits_equal(f(s1, a), f(s1, A)));
          const Tensor e = expand(s1, Shape{n});   // one element, every stride 0
          CHECK(bits_equal(f(a, e), f(A, e)));
          CHECK(bits_equal(f(e, a), f(e, A)));
          CHECK(bits_equal(fs(a, 2.5, false), fs(A, 2.5, false)));
          CHECK(bits_equal(fs(a, -3.0, true), fs(A, -3.0, true)));
          CHECK(bits_equal(fs(a, 0.1, false), fs(A, 0.1, false)));  // not exact in float32
          if (info.family == OpFamily::Binary) {  // in place: out is an operand
            Tensor x = contiguous(A);  // a fresh copy (contiguous(a) would be a itself)
            Tensor X = slice(from_values(av.data(), 2 * n, Shape{2 * n}, dt), 0, 0, 2 * n, 2);
            binary_(op, x, b);
            binary_(op, X, B);
            CHECK(bits_equal(x, X));
          }
          cases += 8;
        }
      }
    }
    CHECK(cases > 200);
  }
}

// Note [Float exponentials in double] in tensor/functors.h: float32 exp, tanh, sigmoid,
// log, log1p, expm1 and softplus through the tensor ops (the vectorised loops, small and
// large) against libm in double, rounded once to float: the correctly rounded result for
// all but near-midpoint values.
namespace {
// x Phi(x) and its derivative Phi(x) + x phi(x) in double, Phi from erfc where it is
// small (no cancellation), for the float results of gelu and gelu_backward.
double normal_cdf(double v) {
  return v < 0 ? 0.5 * std::erfc(-v / std::sqrt(2.0)) : 1 - 0.5 * std::erfc(v / std::sqrt(2.0));
}
double gelu_ref(double v) { return v * normal_cdf(v); }
double gelu_grad_ref(double v) { return normal_cdf(v) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI); }
}  // namespace

TEST_CASE("float32 exp, tanh, sigmoid, log, log1p, expm1, softplus, erf and gelu are correctly rounded", "[pointwise]") {
  std::vector<double> xs;
  for (double v = -110; v <= 110; v += 0.0137) xs.push_back(v);
  for (double v = 1e-9; v < 20; v *= 1.013) {   // tiny to large magnitudes, both signs
    xs.push_back(v);
    xs.push_back(-v);
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double special[] = {0.0, -0.0, 1e-45, -1e-45, 1e-38, 88.72, 88.73, -87.33, -103.9, -104.0, -0.99999994,
                            1e-20, -1e-20, 3e-9, -3e-9, 2e-5, -2e-5, 20.0, -20.0, 40.0, -40.0,
                            9.01, -9.01, 0.5493, inf, -inf, std::nan(""), 1.0, -1.0, 0.99999994, 1.0000001,
                            3.4028235e38, 1.1754942e-38, 0.70710677, 0.70710683, 1.4142135, 1.4142137};
  for (double v : special) xs.push_back(v);
  // floats of every exponent (log's argument reduction), from their bits
  for (uint32_t u = 0x00000001u; u < 0x7f800000u; u += 0x00c0ffeeu) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    xs.push_back(f);
  }
  const int64_t n = int64_t(xs.size());
  Tensor x = from_values(xs.data(), n, Shape{n}, DType::Float32);
  struct Case { Op op; double (*ref)(double); };
  const Case cases[] = {
      {Op::Exp, [](double v) { return std::exp(v); }},
      {Op::Tanh, [](double v) { return std::tanh(v); }},
      {Op::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {Op::Log, [](double v) { return std::log(v); }},
      {Op::Log1p, [](double v) { return std::log1p(v); }},
      {Op::Expm1, [](double v) { return std::expm1(v); }},
      {Op::Softplus, [](double v) { return (v > 0 ? v : 0) + std::log1p(std::exp(-std::fabs(v))); }},
      {Op::Erf, [](double v) { return std::erf(v); }},
      {Op::Gelu, gelu_ref},
  };
  for (const Case& c : cases) {
    INFO(op_name(c.op));
    for (const Tensor& in : {x, narrow(x, 0, 0, 16)}) {   // the general loop and the small one
      Tensor y = unary(c.op, in);
      int64_t wrong = 0;
      for (int64_t i = 0; i < in.numel(); ++i) {
        const float xf = in.data<float>()[i];
        const float want = float(c.ref(double(xf))), got = y.data<float>()[i];
        if (std::isnan(want)) {
          CHECK(std::isnan(got));
        } else if (got != want || std::signbit(got) != std::signbit(want)) {
          ++wrong;
          INFO("x = " << xf << ": got " << got << ", want " << want);
          CHECK(std::fabs(double(got) - want) <= std::fabs(std::nextafter(want, 0.0f) - want));
        }
      }
      CHECK(wrong <= in.numel() / 100000);
    }
  }
}

TEST_CASE("float32 gelu's gradient is correctly rounded, and gelu keeps its far tail", "[pointwise]") {
  // Note [erf in double] in tensor/functors.h.
  std::vector<double> xs, gs;
  for (double v = -16; v <= 16; v += 0.00731) {
    xs.push_back(v);
    gs.push_back(0.75 - 0.0625 * std::fmod(std::fabs(v), 7.0));
  }
  const int64_t n = int64_t(xs.size());
  Tensor x = from_values(xs.data(), n, Shape{n}, DType::Float32);
  Tensor g = from_values(gs.data(), n, Shape{n}, DType::Float32);
  Tensor d = binary(Op::GeluBackward, g, x);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float xf = x.data<float>()[i], gf = g.data<float>()[i];
    const float want = float(double(gf) * gelu_grad_ref(double(xf))), got = d.data<float>()[i];
    if (got != want) {
      ++wrong;
      INFO("x = " << xf << ": got " << got << ", want " << want);
      CHECK(std::fabs(double(got) - want) <= std::fabs(std::nextafter(want, 0.0f) - want));
    }
  }
  CHECK(wrong <= n / 100000);
  // Where x (1 + erf(x / sqrt 2)) / 2 in float cancels to 0, the value is still there.
  const double far[] = {-6.0, -10.0, -14.0};
  Tensor t = unary(Op::Gelu, from_values(far, 3, Shape{3}, DType::Float32));
  for (int i = 0; i < 3; ++i) {
    INFO("gelu(" << far[i] << ")");
    CHECK(t.data<float>()[i] == float(gelu_ref(far[i])));
    CHECK(t.data<float>()[i] < 0.0f);
  }
}
