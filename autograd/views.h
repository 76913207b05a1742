// Strided views of a contiguous layout, shared by the view derivatives
// (autograd/shape.cpp) and the in-place machinery (autograd/inplace.cpp).
#pragma once
#include <functional>

#include "tensor/ops.h"

namespace dl::ag {

// Sizes, strides and offset (elements) of a view within a contiguous base.
struct Geometry {
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
};

// The geometry `view_op` gives when applied to a contiguous tensor of `base_shape`.
Geometry geometry_in(const Shape& base_shape, const std::function<Tensor(const Tensor&)>& view_op);
// The view `geo` of t's values laid out contiguously (recorded).
Tensor strided_view(const Tensor& t, const Geometry& geo);
// Zeros of `base_shape` with the region `geo` set to g (recorded; adjoint of strided_view).
Tensor embed(const Tensor& g, const Shape& base_shape, const Geometry& geo);

struct Node;
// For a node of narrow, slice or select: the region of its input that its output views
// (whose gradient its backward embeds), for the engine to add a gradient into in place
// (Note [Slice gradients added in place] in engine.cpp); false for any other node.
bool region_of(const Node& n, Geometry* geo);

}  // namespace dl::ag
