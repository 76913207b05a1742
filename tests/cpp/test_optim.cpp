// The fused optimizer updates (tensor/optim.h) against the same rules written as
// separate engine ops, in float64 and with strided operands, and their errors. (Against
// PyTorch: tests/lua/test_optim.lua.)
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "ref/ref_check.h"
#include "tensor/optim.h"
#include "tensor/ops.h"

using namespace dl;

namespace {

Tensor add(const Tensor& a, const Tensor& b) { return binary(Op::Add, a, b); }
Tensor mul(const Tensor& a, double s) { return binary(Op::Mul, a, Scalar(s)); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Op::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(Op::Div, a, b); }
Tensor copy_of(const Tensor& t) { return cast(t, t.dtype(), true); }

}  // namespace

// The second size is split between threads (Note [Optimizer steps on two threads]).
const int64_t kRows[] = {9, 300};

TEST_CASE("fused SGD equals its rule written as separate ops", "[optim]") {
  for (int k = 0; k < 10; ++k) {
    const int v = k % 5;
    const int64_t R = kRows[k / 5], C = 7 + k / 5 * 243;
    INFO("variant " << v << ", " << R << " x " << C);
    const double lr = 0.1, wd = v >= 3 ? 0.01 : 0, damp = v == 2 ? 0.25 : 0;
    const double mom = v == 0 ? 0 : 0.9;
    const bool nesterov = v == 4;
    manual_seed(uint64_t(10 + k));
    Tensor p = randn(Shape{R, C}, DType::Float64);
    Tensor g = transpose(randn(Shape{C, R}, DType::Float64), 0, 1);  // strided, as a Linear's
    Tensor buf = randn(Shape{R, C}, DType::Float64);
    Tensor want_p = copy_of(p), want_buf = copy_of(buf);
    for (int step = 0; step < 3; ++step) {
      const bool first = step == 0 && v == 1;
      Tensor d = wd != 0 ? add(g, mul(want_p, wd)) : g;
      if (mom != 0) {
        want_buf = first ? copy_of(d) : add(mul(want_buf, mom), mul(d, 1 - damp));
        d = nesterov ? add(d, mul(want_buf, mom)) : want_buf;
      }
      want_p = add(want_p, mul(d, -lr));
      sgd_step_(p, g, buf, fn::SgdStep{lr, mom, damp, wd, nesterov, first});
    }
    check_values(p, values_of(want_p), 1e-14);
    if (mom != 0) check_values(buf, values_of(want_buf), 1e-14);
  }
}

TEST_CASE("fused Adam and AdamW equal their rule written as separate ops", "[optim]") {
  for (int k = 0; k < 6; ++k) {
    const int v = k % 3;
    const Shape sh = k < 3 ? Shape{5, 6} : Shape{200, 300};
    INFO("variant " << v << ", " << sh);
    const double lr = 0.01, b1 = 0.8, b2 = 0.99, eps = 1e-3, wd = v == 0 ? 0 : 0.1;
    const bool decoupled = v == 2, amsgrad = v == 1;
    manual_seed(uint64_t(20 + k));
    Tensor p = randn(sh, DType::Float64), g0 = randn(sh, DType::Float64);
    Tensor m = zeros(sh, DType::Float64), s = zeros(sh, DType::Float64);
    Tensor vmax = amsgrad ? zeros(sh, DType::Float64) : Tensor();
    Tensor wp = copy_of(p), wm = copy_of(m), ws = copy_of(s), wx = zeros(sh, DType::Float64);
    for (int t = 1; t <= 3; ++t) {
      Tensor g = mul(g0, double(t));
      Tensor gg = g;
      if (wd != 0 && decoupled) wp = mul(wp, 1 - lr * wd);
      if (wd != 0 && !decoupled) gg = add(g, mul(wp, wd));
      wm = add(mul(wm, b1), mul(gg, 1 - b1));
      ws = add(mul(ws, b2), mul(mul(gg, gg), 1 - b2));
      Tensor use = ws;
      if (amsgrad) use = wx = binary(Op::Maximum, wx, ws);
      const double bc1 = 1 - std::pow(b1, t), bc2 = std::sqrt(1 - std::pow(b2, t));
      Tensor denom = binary(Op::Add, mul(unary(Op::Sqrt, use), 1 / bc2), Scalar(eps));
      wp = add(wp, mul(div(wm, denom), -lr / bc1));
      adam_step_(p, g, m, s, vmax, fn::AdamStep{lr, b1, b2, eps, wd, bc1, bc2, decoupled});
    }
    check_values(p, values_of(wp), 1e-12);
    check_values(m, values_of(wm), 1e-14);
    check_values(s, values_of(ws), 1e-14);
  }
}

TEST_CASE("amsgrad's maximum keeps a NaN, as torch.maximum does", "[optim]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  fn::AdamStep s{0.1, 0.9, 0.99, 1e-8, 0, 0.1, 0.1, false};
  double p = 1, m = 0, v = 0, vmax = nan;
  s(p, 1.0, m, v, &vmax);
  CHECK(std::isnan(vmax));
  vmax = 5;
  v = nan;
  s(p, 1.0, m, v, &vmax);
  CHECK(std::isnan(vmax));
}

TEST_CASE("fused updates refuse mismatched tensors with a clear error", "[optim]") {
  Tensor p = zeros(Shape{3, 2}, DType::Float32);
  fn::SgdStep sgd{0.1, 0.9, 0, 0, false, false};
  CHECK_THROWS_WITH(sgd_step_(p, zeros(Shape{2, 3}, DType::Float32), zeros(Shape{3, 2}, DType::Float32), sgd),
                    "sgd_step: expected the gradient of the parameter's shape (3, 2), got (2, 3)");
  CHECK_THROWS_WITH(sgd_step_(p, zeros(Shape{3, 2}, DType::Float32), zeros(Shape{3, 2}, DType::Float64), sgd),
                    "sgd_step: expected the momentum buffer of the parameter's dtype float32, got float64");
  CHECK_THROWS_WITH(sgd_step_(zeros(Shape{2}, DType::Int64), zeros(Shape{2}, DType::Int64), Tensor(), sgd),
                    "sgd_step: expected a floating-point parameter, got int64");
  fn::AdamStep adam{0.1, 0.9, 0.99, 1e-8, 0, 0, 1, false};
  Tensor z = zeros(Shape{3, 2}, DType::Float32);
  CHECK_THROWS_WITH(adam_step_(p, z, z, zeros(Shape{3}, DType::Float32), Tensor(), adam),
                    "adam_step: expected the second moment (exp_avg_sq) of the parameter's shape (3, 2), got (3,)");
  CHECK_THROWS_WITH(adam_step_(p, z, copy_of(z), copy_of(z), Tensor(), adam),
                    Catch::Contains("bias corrections must be positive"));
  // A float64 gradient is converted to the parameter's float32.
  sgd_step_(p, ones(Shape{3, 2}, DType::Float64), zeros(Shape{3, 2}, DType::Float32),
            fn::SgdStep{0.5, 0, 0, 0, false, false});
  check_values(p, std::vector<double>(6, -0.5), 0);
}

TEST_CASE("copies that transpose are tiled and exact", "[optim][view]") {
  // cpu::copy's tiled path: sizes around and across its 32-element tiles, and one past
  // the parallel grain.
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 5}, {5, 1}, {31, 33}, {32, 64}, {70, 45}, {600, 500}}) {
    INFO(r << " x " << c);
    Tensor src = arange(0, double(r * c), 1, DType::Float32);
    Tensor t = transpose(view(src, Shape{c, r}), 0, 1);  // (r, c), strided
    Tensor out = contiguous(t);
    REQUIRE(out.is_contiguous());
    std::vector<double> want;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) want.push_back(double(j * r + i));
    check_values(out, want, 0);
  }
}
