// fft_c2c's kernel (tensor/cpu/fft.cpp) against the transform's definition summed in long
// double, for lengths of every kind: 1, powers of two, primes (Bluestein), composites.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tensor/fft.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace dl;

namespace {

// sum_j x_j e^(-+2 pi i jk / n), jk reduced mod n, in long double.
std::vector<long double> direct(const std::vector<double>& x, int64_t n, bool inverse) {
  std::vector<long double> out(size_t(2 * n));
  const long double pi = 3.141592653589793238462643383279502884L;
  for (int64_t k = 0; k < n; ++k) {
    long double re = 0, im = 0;
    for (int64_t j = 0; j < n; ++j) {
      const long double a = -2 * pi * (long double)((j * k) % n) / (long double)n * (inverse ? -1 : 1);
      const long double c = std::cos(a), s = std::sin(a);
      re += x[size_t(2 * j)] * c - x[size_t(2 * j + 1)] * s;
      im += x[size_t(2 * j)] * s + x[size_t(2 * j + 1)] * c;
    }
    out[size_t(2 * k)] = re;
    out[size_t(2 * k + 1)] = im;
  }
  return out;
}

}  // namespace

TEST_CASE("fft_c2c equals the transform's definition for every kind of length, both signs", "[fft]") {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 12, 17, 64, 97, 100, 128, 243, 1000}) {
    for (bool inverse : {false, true}) {
      for (DType dt : {DType::Float64, DType::Float32}) {
        manual_seed(uint64_t(n) * 7 + inverse);
        Tensor x = cast(rand(Shape{3, n, 2}, DType::Float64), dt);
        Tensor y = cast(fft_c2c(x, inverse), DType::Float64);
        Tensor x64 = cast(x, DType::Float64);
        const double tol = dt == DType::Float64 ? 1e-13 : 2e-6;
        for (int64_t r = 0; r < 3; ++r) {
          std::vector<double> row(x64.data<double>() + r * 2 * n, x64.data<double>() + (r + 1) * 2 * n);
          const std::vector<long double> want = direct(row, n, inverse);
          double scale = 1;   // the transform's size: |X| is up to n
          for (long double v : want) scale = std::max(scale, double(std::fabs(v)));
          for (int64_t i = 0; i < 2 * n; ++i) {
            INFO("n " << n << (inverse ? " inverse" : " forward") << " dtype " << dtype_name(dt) << " element " << i);
            REQUIRE(std::fabs(y.data<double>()[r * 2 * n + i] - double(want[size_t(i)])) <= tol * scale);
          }
        }
      }
    }
  }
}

TEST_CASE("fft_c2c: the inverse undoes the forward (times n); bad shapes are errors naming fft", "[fft]") {
  manual_seed(3);
  Tensor x = rand(Shape{4, 30, 2}, DType::Float64);
  Tensor back = binary(Op::Div, fft_c2c(fft_c2c(x, false), true), Scalar(30.0));
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(std::fabs(back.data<double>()[i] - x.data<double>()[i]) < 1e-14);
  REQUIRE_THROWS_WITH(fft_c2c(rand(Shape{4, 3}, DType::Float32), false),
                      Catch::Contains("fft: expected complex values as (real, imaginary) pairs in a last dim of 2"));
  REQUIRE_THROWS_WITH(fft_c2c(zeros(Shape{0, 2}, DType::Float32), false), Catch::Contains("fft: a transform of length 0"));
  REQUIRE_THROWS_WITH(fft_c2c(zeros(Shape{3, 2}, DType::Int64), false), Catch::Contains("fft: expected a floating-point"));
  // the twiddles are exact at the quarter turns
  const fft::Complex q = fft::twiddle(1, 4, false);
  REQUIRE(q.re == 0);
  REQUIRE(q.im == -1);
}
