// The direct convolution kernels (tensor/cpu/conv_direct.h), every variant this CPU
// runs, against a plain loop in double; conv2d's own tests (test_nn.cpp, against torch)
// reach them through the engine with whichever variant the CPU picks.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensor/cpu/conv_direct.h"

using namespace dl::cpu;

namespace {

struct Case {
  int64_t C, H, W, O, kh, kw, ph, pw, dh, dw;
  bool bias;
};

// y[o][oy][ox] = bias[o] + sum x[c][oy*1 - ph + ki*dh][ox - pw + kj*dw] w[o][c][ki][kj]
std::vector<double> naive(const Case& k, const std::vector<float>& x, const std::vector<float>& w,
                          const std::vector<float>& b, int64_t Ho, int64_t Wo) {
  std::vector<double> y(size_t(k.O * Ho * Wo));
  for (int64_t o = 0; o < k.O; ++o)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox) {
        double s = k.bias ? b[size_t(o)] : 0.0;
        for (int64_t c = 0; c < k.C; ++c)
          for (int64_t ki = 0; ki < k.kh; ++ki)
            for (int64_t kj = 0; kj < k.kw; ++kj) {
              const int64_t iy = oy - k.ph + ki * k.dh, ix = ox - k.pw + kj * k.dw;
              if (iy < 0 || iy >= k.H || ix < 0 || ix >= k.W) continue;
              s += double(x[size_t((c * k.H + iy) * k.W + ix)]) * w[size_t(((o * k.C + c) * k.kh + ki) * k.kw + kj)];
            }
        y[size_t((o * Ho + oy) * Wo + ox)] = s;
      }
  return y;
}

}  // namespace

TEST_CASE("direct conv: every kernel variant matches a plain loop") {
  const Case cases[] = {
      {3, 5, 5, 4, 3, 3, 1, 1, 1, 1, true},       // padded, bias
      {1, 28, 28, 16, 3, 3, 0, 0, 1, 1, true},    // a first layer
      {16, 26, 26, 16, 3, 3, 0, 0, 1, 1, false},  // a second layer
      {16, 24, 24, 16, 3, 3, 2, 2, 1, 1, false},  // its input gradient as a convolution
      {5, 9, 13, 7, 2, 4, 0, 3, 1, 1, true},      // outputs not a multiple of a block, odd sizes
      {2, 11, 8, 9, 3, 2, 2, 1, 2, 3, true},      // dilated
      {4, 3, 3, 64, 3, 3, 1, 1, 1, 1, false},     // the most outputs it takes
      {2, 1, 40, 3, 1, 5, 0, 2, 1, 1, true},      // one row
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int v = 0; v < direct_conv_variants(); ++v) {
    for (bool in_place : {false, true}) {
      const std::string name = direct_conv_use(v);
      for (const Case& k : cases) {
        INFO(name << (in_place ? ", x followed by more" : ", x alone") << ": C " << k.C << " H " << k.H << " W " << k.W
                  << " O " << k.O << " kernel " << k.kh << "x" << k.kw);
        REQUIRE(direct_conv_suits(k.C, k.O, k.kh, k.kw));
        const DirectConv d = direct_conv_plan(k.C, k.H, k.W, k.O, k.kh, k.kw, k.ph, k.pw, k.dh, k.dw);
        std::vector<float> x(size_t(k.C * k.H * k.W)), w(size_t(k.O * d.taps)), b(size_t(k.O));
        for (auto* t : {&x, &w, &b})
          for (float& e : *t) e = u(rng);
        // Unpadded, a sample followed by readable memory (the next samples: NaN here, which
        // may only reach the outputs thrown away) is read in place; alone, it is copied.
        const int64_t n = k.C * k.H * k.W;
        if (in_place) x.resize(size_t(n + d.xp_len), NAN);
        const int64_t readable = int64_t(x.size());
        std::vector<float> wt(size_t(d.taps * k.O)), scratch(size_t(d.scratch_len), NAN);  // NaN: unwritten is seen
        std::vector<int64_t> shift(size_t(d.taps));
        direct_conv_prepare(d, w.data(), wt.data(), shift.data());
        std::vector<float> y(size_t(k.O * d.Ho * d.Wo) + 1, -7.0f);  // one past the end: must stay
        direct_conv_sample(d, x.data(), readable, wt.data(), shift.data(), k.bias ? b.data() : nullptr, y.data(),
                           scratch.data());
        const std::vector<double> want = naive(k, x, w, b, d.Ho, d.Wo);
        std::string bad;
        for (size_t i = 0; i < want.size() && bad.empty(); ++i)
          if (!(std::fabs(y[i] - want[i]) <= 1e-5 * (1 + std::sqrt(double(d.taps)))))
            bad =
                "element " + std::to_string(i) + ": got " + std::to_string(y[i]) + ", want " + std::to_string(want[i]);
        CHECK(bad == "");
        CHECK(y.back() == -7.0f);

        // The weight gradient for an output gradient gy: gw[o][c][ki][kj] = sum over the
        // outputs of gy[o][oy][ox] x[c][oy - ph + ki dh][ox - pw + kj dw], accumulated
        // (twice here) in (C kh kw, O) order as d.lanes partial sums, then totalled, into
        // another buffer and in place.
        std::vector<float> gy(size_t(k.O * d.Ho * d.Wo));
        for (float& e : gy) e = u(rng);
        // (the sentinel just past the sums proper, inside acc_len's rounding: unwritten)
        REQUIRE(d.acc_len >= d.taps * k.O * d.lanes);
        std::vector<float> lanes(size_t(d.taps * k.O * d.lanes) + 1, 0.0f), acc(size_t(d.taps * k.O) + 1, 0.5f);
        lanes.back() = 0.5f;
        std::fill(scratch.begin(), scratch.end(), NAN);
        direct_conv_weight_grad_sample(d, x.data(), gy.data(), shift.data(), lanes.data(), scratch.data());
        direct_conv_weight_grad_sample(d, x.data(), gy.data(), shift.data(), lanes.data(), scratch.data());
        CHECK(lanes.back() == 0.5f);
        direct_conv_weight_grad_total(d, lanes.data(), acc.data());
        direct_conv_weight_grad_total(d, lanes.data(), lanes.data());
        CHECK(std::equal(acc.begin(), acc.end() - 1, lanes.begin()));
        bad.clear();
        for (int64_t o = 0; o < k.O && bad.empty(); ++o)
          for (int64_t c = 0; c < k.C; ++c)
            for (int64_t ki = 0; ki < k.kh; ++ki)
              for (int64_t kj = 0; kj < k.kw; ++kj) {
                double s = 0;
                for (int64_t oy = 0; oy < d.Ho; ++oy)
                  for (int64_t ox = 0; ox < d.Wo; ++ox) {
                    const int64_t iy = oy - k.ph + ki * k.dh, ix = ox - k.pw + kj * k.dw;
                    if (iy < 0 || iy >= k.H || ix < 0 || ix >= k.W) continue;
                    s += double(gy[size_t((o * d.Ho + oy) * d.Wo + ox)]) * x[size_t((c * k.H + iy) * k.W + ix)];
                  }
                const int64_t ct = (c * k.kh + ki) * k.kw + kj;
                const double got = acc[size_t(ct * k.O + o)], want = 2 * s;
                if (!(std::fabs(got - want) <= 1e-5 * (1 + std::sqrt(double(d.Ho * d.Wo)))) && bad.empty())
                  bad = "gw[" + std::to_string(o) + "][" + std::to_string(ct) + "]: got " + std::to_string(got) +
                        ", want " + std::to_string(want);
              }
        CHECK(bad == "");
        CHECK(acc.back() == 0.5f);
      }
    }
  }
  direct_conv_use(0);
}

TEST_CASE("direct conv: shapes it leaves to im2col") {
  CHECK_FALSE(direct_conv_suits(16, 65, 3, 3));   // many outputs
  CHECK_FALSE(direct_conv_suits(16, 16, 1, 1));   // 1x1: a GEMM needs no columns
  CHECK_FALSE(direct_conv_suits(512, 16, 3, 3));  // a long reduction
}
