#include <catch2/catch.hpp>

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
