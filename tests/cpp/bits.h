// Test helper: two tensors of one dtype and shape with the same bytes (nan equal to the
// same nan), whatever their layouts.
#pragma once
#include <cstring>

#include "tensor/ops.h"

namespace dl::test {

inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = contiguous(a), y = contiguous(b);
  return std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * x.itemsize()) == 0;
}

}  // namespace dl::test
