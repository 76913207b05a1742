// Comparing dlua results with the PyTorch references of tests/cpp/ref/*.inc, which
// tests/ref/gen_view_refs.py generates (the reference values never come from dlua).
//
//   dl::Tensor x = from_ref(ref::x234, dl::DType::Float32);
//   check_ref(dl::view(x, {4, -1}), ref::view_4m1);   // shape, strides, offset, values
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/ops.h"

// In a namespace of its own: other suites have helpers of the same names.
namespace ref {

struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // torch's strides of a view result; empty: not checked
  int64_t offset;                // torch's storage offset; -1: not checked
  std::vector<double> values;    // row-major
};

inline dl::Tensor from_ref(const RefTensor& r, dl::DType dt) {
  return dl::from_values(r.values.data(), int64_t(r.values.size()), dl::Shape(r.shape), dt);
}

// Every element of t (any layout) in row-major order.
inline std::vector<double> values_of(const dl::Tensor& t) {
  std::vector<double> v;
  v.reserve(size_t(t.numel()));
  int64_t idx[dl::kMaxDims] = {};
  for (int64_t i = 0; i < t.numel(); ++i) {
    v.push_back(t.value_at(idx));
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return v;
}

// Values equal within tol * (1 + |expected|); NaN never matches.
inline void check_values(const dl::Tensor& t, const std::vector<double>& expected, double tol) {
  std::vector<double> v = values_of(t);
  REQUIRE(v.size() == expected.size());
  std::string mismatch;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(std::fabs(v[i] - expected[i]) <= tol * (1 + std::fabs(expected[i])))) {
      std::ostringstream os;
      os << "element " << i << ": got " << v[i] << ", expected " << expected[i];
      mismatch = os.str();
      break;
    }
  }
  CHECK(mismatch == "");
}

inline void check_ref(const dl::Tensor& t, const RefTensor& r, double tol = 0) {
  REQUIRE(t.shape() == dl::Shape(r.shape));
  if (!r.strides.empty()) CHECK(t.strides() == dl::Shape(r.strides));
  if (r.offset >= 0) CHECK(t.offset() == r.offset);
  check_values(t, r.values, tol);
}

// The message of the dl::Error that f throws, or "<no error>".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dl::Error& e) {
    return e.what();
  }
  return "<no error>";
}

template <typename F>
dl::ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const dl::Error& e) {
    return e.kind();
  }
  return dl::ErrorKind::Internal;
}

}  // namespace ref

using ref::check_ref;
using ref::check_values;
using ref::error_kind_of;
using ref::error_of;
using ref::from_ref;
using ref::RefTensor;
using ref::values_of;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
