#include <catch2/catch.hpp>
#include <limits>

#include "tensor/ops.h"

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
