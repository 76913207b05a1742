// Shapes and strides: up to kMaxDims dimensions stored inline (no heap).
#pragma once
#include <cstdint>
#include <optional>
#include <initializer_list>
#include <ostream>
#include <vector>

#include "tensor/error.h"

namespace dl {

constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) { for (int64_t v : d) push_back(v); }
  explicit Shape(const std::vector<int64_t>& d) { for (int64_t v : d) push_back(v); }
  Shape(const int64_t* d, int n) { for (int i = 0; i < n; ++i) push_back(d[i]); }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  const int64_t* data() const { return d_; }
  int64_t* data() { return d_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    DL_CHECK(n_ < kMaxDims, "shape: at most ", kMaxDims, " dimensions are supported");
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    DL_CHECK(n_ < kMaxDims, "shape: at most ", kMaxDims, " dimensions are supported");
    for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
    ++n_;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int n, int64_t fill = 0) {
    DL_CHECK(n >= 0 && n <= kMaxDims, "shape: at most ", kMaxDims, " dimensions are supported");
    for (int i = n_; i < n; ++i) d_[i] = fill;
    n_ = n;
  }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(d_, d_ + n_); }

  bool operator==(const Shape& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i) if (d_[i] != o.d_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

// "(2, 3)", "()" for a scalar, "(5,)" for one dimension, as Python prints tuples.
std::ostream& operator<<(std::ostream& os, const Shape& s);

// Number of elements, checked against overflow; throws naming `op`.
int64_t checked_numel(const Shape& s, const char* op);
// Row-major strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& s);
// Whether (sizes, strides) lay elements out as contiguous_strides would (dims of size 1
// may have any stride): Tensor::is_contiguous.
bool contiguous_layout(const Shape& sizes, const Shape& strides);
// Strides that make `new_sizes` a view of a tensor with (`sizes`, `strides`), or nothing
// when none exist: what view() and reshape() decide (tensor/view.cpp).
std::optional<Shape> compute_stride(const Shape& sizes, const Shape& strides, const Shape& new_sizes);
// The sizes `shape` asks for, with its one -1 inferred from `numel` (PyTorch's
// infer_size); throws naming `op` when the shape cannot hold `numel` elements.
Shape infer_size(const Shape& shape, int64_t numel, const char* op);

// A tensor's geometry without its storage, and the geometry the view ops give from their
// input's. Dims are 0-based and in range: the ops wrap and check them first, with their
// own errors. The eager ops (tensor/view.cpp) and dl.compile's promised views
// (compile/plan.cpp for the sizes, bindings/capi_compile.cpp for the strides) share them.
struct Layout {
  Shape sizes, strides;
};
Layout transpose_layout(Layout x, int d0, int d1);
// Without d, every size-1 dim is dropped; with d, that one if its size is 1.
Layout squeeze_layout(const Layout& x, std::optional<int> d);
// x has fewer than kMaxDims dims; d may be x's rank (a new last dim).
Layout unsqueeze_layout(Layout x, int d);

// NumPy broadcasting of two shapes; throws "op: shapes (..) and (..) cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Normalises a dimension given 0-based (negative counts from the end) for `ndim` dims.
int wrap_dim(int64_t dim, int ndim, const char* op);

}  // namespace dl
