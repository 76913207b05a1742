// fft_c2c's kernel (tensor/cpu/fft.cpp) against the transform's definition summed in long
// double, for lengths of every kind: 1, powers of two, primes (Bluestein), composites.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/cpu/loops.h"
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

namespace {

// The weights of Note [A real signal's transform]: 1 for bin 0 and n/2, `w` between.
double bin_weight(int64_t k, int64_t n, int64_t w) { return k == 0 || 2 * k == n ? 1 : double(w); }

double total(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.data<double>()[i];
  return s;
}

}  // namespace

TEST_CASE("fft_r2c and fft_c2r equal their definitions for every kind of length and weight", "[fft]") {
  // even lengths run a complex transform of n/2 (74: Bluestein of 37), odd ones of n
  for (int64_t n : {1, 2, 3, 4, 6, 7, 10, 16, 25, 74, 97, 100, 1000}) {
    const int64_t bins = n / 2 + 1;
    for (int64_t w : {1, 2}) {
      for (DType dt : {DType::Float64, DType::Float32}) {
        INFO("n " << n << " weight " << w << " dtype " << dtype_name(dt));
        manual_seed(uint64_t(n) * 11 + uint64_t(w));
        const double tol = dt == DType::Float64 ? 1e-13 : 2e-6;
        // forward: the real row as pairs (x, 0), transformed by the definition
        Tensor x = cast(rand(Shape{2, n}, DType::Float64), dt);
        Tensor y = cast(fft_r2c(x, w), DType::Float64);
        REQUIRE(y.shape() == Shape{2, bins, 2});
        Tensor x64 = cast(x, DType::Float64);
        for (int64_t r = 0; r < 2; ++r) {
          std::vector<double> row(size_t(2 * n), 0.0);
          for (int64_t j = 0; j < n; ++j) row[size_t(2 * j)] = x64.data<double>()[r * n + j];
          const std::vector<long double> want = direct(row, n, false);
          for (int64_t k = 0; k < bins; ++k) {
            const double c = bin_weight(k, n, w), scale = double(n);
            const bool edge = k == 0 || 2 * k == n;
            REQUIRE(std::fabs(y.data<double>()[(r * bins + k) * 2] - c * double(want[size_t(2 * k)])) <= tol * scale);
            const double im = y.data<double>()[(r * bins + k) * 2 + 1];
            if (edge) REQUIRE(im == 0);
            else REQUIRE(std::fabs(im - c * double(want[size_t(2 * k + 1)])) <= tol * scale);
          }
        }
        // back: the Hermitian spectrum written out (the middle bins weighted w / 2, the
        // edges' imaginary parts dropped), inverted by the definition; its real part
        Tensor b = cast(rand(Shape{2, bins, 2}, DType::Float64), dt);
        Tensor v = cast(fft_c2r(b, n, w), DType::Float64);
        REQUIRE(v.shape() == Shape{2, n});
        Tensor b64 = cast(b, DType::Float64);
        for (int64_t r = 0; r < 2; ++r) {
          std::vector<double> full(size_t(2 * n), 0.0);
          for (int64_t k = 0; k < bins; ++k) {
            const bool edge = k == 0 || 2 * k == n;
            const double c = edge ? 1 : double(w) / 2;
            const double re = c * b64.data<double>()[(r * bins + k) * 2];
            const double im = edge ? 0 : c * b64.data<double>()[(r * bins + k) * 2 + 1];
            full[size_t(2 * k)] = re;
            full[size_t(2 * k + 1)] = im;
            if (!edge) {
              full[size_t(2 * (n - k))] = re;
              full[size_t(2 * (n - k) + 1)] = -im;
            }
          }
          const std::vector<long double> want = direct(full, n, true);
          for (int64_t j = 0; j < n; ++j)
            REQUIRE(std::fabs(v.data<double>()[r * n + j] - double(want[size_t(2 * j)])) <= tol * double(n));
        }
      }
    }
  }
}

TEST_CASE("fft_r2c and fft_c2r of one weight are each other's adjoints; c2r with 2 inverts r2c with 1", "[fft]") {
  for (int64_t n : {1, 2, 5, 8, 38, 63}) {
    const int64_t bins = n / 2 + 1;
    manual_seed(uint64_t(n));
    Tensor x = rand(Shape{3, n}, DType::Float64), y = rand(Shape{3, bins, 2}, DType::Float64);
    for (int64_t w : {1, 2}) {
      INFO("n " << n << " weight " << w);
      // <r2c(x), y> = <x, c2r(y)>, over pairs as real numbers
      const double left = total(binary(Op::Mul, fft_r2c(x, w), y));
      const double right = total(binary(Op::Mul, x, fft_c2r(y, n, w)));
      REQUIRE(std::fabs(left - right) <= 1e-12 * double(n) * 3);
    }
    Tensor back = binary(Op::Div, fft_c2r(fft_r2c(x, 1), n, 2), Scalar(double(n)));
    for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(std::fabs(back.data<double>()[i] - x.data<double>()[i]) < 1e-14);
  }
  REQUIRE_THROWS_WITH(fft_r2c(zeros(Shape{3}, DType::Int64), 1), Catch::Contains("rfft: expected a floating-point"));
  REQUIRE_THROWS_WITH(fft_r2c(zeros(Shape{3}, DType::Float32), 3), Catch::Contains("rfft: the middle bins' weight"));
  REQUIRE_THROWS_WITH(fft_c2r(zeros(Shape{4, 2}, DType::Float32), 8, 2),
                      Catch::Contains("irfft: a signal of 8 values has 5 bins, got 4"));
  REQUIRE_THROWS_WITH(fft_c2r(zeros(Shape{4, 2}, DType::Float32), 0, 2), Catch::Contains("irfft: the signal's length"));
  REQUIRE_THROWS_WITH(fft_c2r(zeros(Shape{4, 3}, DType::Float32), 6, 2), Catch::Contains("irfft: expected complex values"));
}

TEST_CASE("a row's transform is the same bits alone, in a pack of rows and in each vector build", "[fft]") {
  // Note [Rows transformed together] in tensor/cpu/fft.cpp: a batch runs as packs of rows
  // (the last filled with zero rows), one row alone; every lane rounds as the scalar code.
  for (int64_t n : {1, 6, 7, 40, 74, 243}) {
    manual_seed(uint64_t(n) + 100);
    const int64_t rows = 11;   // packs of 2, 4 or 8 rows with a partial last one
    Tensor c = rand(Shape{rows, n, 2}, DType::Float64), x = rand(Shape{rows, n}, DType::Float64);
    Tensor b = rand(Shape{rows, n / 2 + 1, 2}, DType::Float32);
    auto each = [&](auto&& op, const Tensor& in, int64_t r) {   // row r transformed alone
      return op(contiguous(narrow(in, 0, r, 1)));
    };
    auto same_bits = [&](const Tensor& batch, const Tensor& alone, int64_t r, const char* what) {
      const int64_t k = alone.numel();
      const size_t bytes = size_t(k) * alone.itemsize();
      INFO(what << " n " << n << " row " << r);
      REQUIRE(std::memcmp(static_cast<const char*>(batch.raw_data()) + size_t(r) * bytes, alone.raw_data(), bytes) == 0);
    };
    auto c2c = [](const Tensor& t) { return fft_c2c(t, true); };
    auto r2c = [](const Tensor& t) { return fft_r2c(t, 2); };
    auto c2r = [n](const Tensor& t) { return fft_c2r(t, n, 1); };
    for (int bytes = cpu::vector_bytes(); bytes >= 16; bytes /= 2) {
      cpu::limit_vector_bytes(bytes);
      Tensor yc = c2c(c), yr = r2c(x), yb = c2r(b);
      for (int64_t r = 0; r < rows; ++r) {
        same_bits(yc, each(c2c, c, r), r, "c2c");
        same_bits(yr, each(r2c, x, r), r, "r2c");
        same_bits(yb, each(c2r, b, r), r, "c2r");
      }
    }
    cpu::limit_vector_bytes(0);
  }
}
