// Shape, indexing and linear-algebra ops, recorded: forwards and derivatives.
//
// The backward of a view that picks part of its input (narrow, slice, select) puts the
// gradient back into zeros of the input's shape: embed(). Both embed() and its
// opposite strided_view() are recorded ops, each the other's derivative, so these
// gradients nest to any order. They also serve in-place writes (autograd/inplace.cpp).
#include "autograd/math.h"
#include "autograd/record.h"
#include "autograd/views.h"
#include "tensor/observe.h"

namespace dl::ag {

using namespace math;

// ---- strided views of a contiguous layout, and their adjoint ---------------------------

Geometry geometry_in(const Shape& base_shape, const std::function<Tensor(const Tensor&)>& view_op) {
  // The view op only computes metadata: run it on a storage-less contiguous tensor, not
  // reported to an observer (a capture would take the probe for a value and read it).
  Unobserved quiet;
  auto st = Storage::borrow(nullptr, 0, Device{});
  Tensor probe(make_ref<TensorImpl>(st, base_shape, contiguous_strides(base_shape), 0, DType::Float32));
  Tensor v = view_op(probe);
  return Geometry{v.shape(), v.strides(), v.offset()};
}

namespace {
Grads strided_view_backward(Node& n, const TensorList& g);
Grads embed_backward(Node& n, const TensorList& g);

void store(Attrs& a, const Geometry& geo) {
  a.shape = geo.sizes;
  a.dims = geo.strides;
  a.i[0] = geo.offset;
}
}  // namespace

Tensor strided_view(const Tensor& t, const Geometry& geo) {
  Tensor c = ag::contiguous(t);
  Tensor y = dl::strided_view(c, geo.sizes, geo.strides, geo.offset);
  Ref<Node> n = maybe_node("strided_view", strided_view_backward, {&c});
  if (!n) return y;
  store(n->attrs, geo);
  return finish(n, y);
}

Tensor embed(const Tensor& g, const Shape& base_shape, const Geometry& geo) {
  Tensor z = dl::embed(g, base_shape, geo.sizes, geo.strides, geo.offset);
  Ref<Node> n = maybe_node("embed", embed_backward, {&g});
  if (!n) return z;
  store(n->attrs, geo);
  return finish(n, z);
}

namespace {
Geometry geometry_of(const Attrs& a) { return Geometry{a.shape, a.dims, a.i[0]}; }
Grads strided_view_backward(Node& n, const TensorList& g) {
  return {embed(g[0], n.inputs[0].shape, geometry_of(n.attrs))};
}
Grads embed_backward(Node& n, const TensorList& g) {
  return {strided_view(g[0], geometry_of(n.attrs))};
}

// narrow/slice/select: the input's shape is known to the node; the geometry is
// recomputed from the op's parameters (attrs.i: dim and up to three integers, kept as
// integers: a slice's step may be near 2^63) when the backward runs.
Geometry region_geometry(Op op, const Node& n) {
  const Attrs& a = n.attrs;
  return geometry_in(n.inputs[0].shape, [&](const Tensor& p) {
    switch (op) {
      case Op::Narrow: return dl::narrow(p, int(a.i[0]), a.i[1], a.i[2]);
      case Op::Slice: return dl::slice(p, int(a.i[0]), a.i[1], a.i[2], a.i[3]);
      default: return dl::select(p, int(a.i[0]), a.i[1]);
    }
  });
}
Grads region_backward(Op op, Node& n, const TensorList& g) {
  return {embed(g[0], n.inputs[0].shape, region_geometry(op, n))};
}

Tensor record_region(Op op, const Tensor& x, Tensor y, int64_t dim, int64_t p1, int64_t p2, int64_t p3) {
  Ref<Node> n = maybe_node(op, {&x});
  if (!n) return y;
  n->attrs.i[0] = dim;
  n->attrs.i[1] = p1;
  n->attrs.i[2] = p2;
  n->attrs.i[3] = p3;
  return finish(n, y);
}

// Views that only rearrange: the gradient is reshaped back to the input's shape.
Grads reshape_backward(Node& n, const TensorList& g) { return {ag::reshape(g[0], n.inputs[0].shape)}; }
}  // namespace

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  return record_region(Op::Narrow, x, dl::narrow(x, dim, start, length), dim, start, length, 0);
}
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t stop, int64_t step) {
  return record_region(Op::Slice, x, dl::slice(x, dim, start, stop, step), dim, start, stop, step);
}
Tensor select(const Tensor& x, int dim, int64_t index) {
  return record_region(Op::Select, x, dl::select(x, dim, index), dim, index, 0, 0);
}
template <> Grads derivative<Op::Narrow>(Node& n, const TensorList& g) {
  return region_backward(Op::Narrow, n, g);
}
template <> Grads derivative<Op::Slice>(Node& n, const TensorList& g) {
  return region_backward(Op::Slice, n, g);
}
template <> Grads derivative<Op::Select>(Node& n, const TensorList& g) {
  return region_backward(Op::Select, n, g);
}
bool region_of(const Node& n, Geometry* geo) {
  Op op;
  if (n.backward == &derivative<Op::Narrow>) op = Op::Narrow;
  else if (n.backward == &derivative<Op::Slice>) op = Op::Slice;
  else if (n.backward == &derivative<Op::Select>) op = Op::Select;
  else return false;
  *geo = region_geometry(op, n);
  return true;
}

Tensor view(const Tensor& x, const Shape& shape) { return finish(maybe_node(Op::View, {&x}), dl::view(x, shape)); }
Tensor reshape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  return finish(maybe_node(Op::View, {&x}), dl::reshape(x, shape));
}
Tensor squeeze(const Tensor& x, std::optional<int> dim) {
  return finish(maybe_node(Op::Squeeze, {&x}), dl::squeeze(x, dim));
}
Tensor unsqueeze(const Tensor& x, int dim) {
  return finish(maybe_node(Op::Unsqueeze, {&x}), dl::unsqueeze(x, dim));
}
Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  return finish(maybe_node(Op::View, {&x}), dl::flatten(x, start_dim, end_dim));
}
template <> Grads derivative<Op::View>(Node& n, const TensorList& g) { return reshape_backward(n, g); }
template <> Grads derivative<Op::Squeeze>(Node& n, const TensorList& g) { return reshape_backward(n, g); }
template <> Grads derivative<Op::Unsqueeze>(Node& n, const TensorList& g) { return reshape_backward(n, g); }

Tensor transpose(const Tensor& x, int d0, int d1) {
  Tensor y = dl::transpose(x, d0, d1);
  Ref<Node> n = maybe_node(Op::Transpose, {&x});
  if (!n) return y;
  n->attrs.i[0] = d0;
  n->attrs.i[1] = d1;
  return finish(n, y);
}
template <> Grads derivative<Op::Transpose>(Node& n, const TensorList& g) {
  return {ag::transpose(g[0], int(n.attrs.i[0]), int(n.attrs.i[1]))};
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  Tensor y = dl::permute(x, order);
  Ref<Node> n = maybe_node(Op::Permute, {&x});
  if (!n) return y;
  for (int d : order) n->attrs.dims.push_back(wrap_dim(d, x.dim(), "permute"));
  return finish(n, y);
}
template <> Grads derivative<Op::Permute>(Node& n, const TensorList& g) {
  std::vector<int> inverse(size_t(n.attrs.dims.size()));
  for (int i = 0; i < n.attrs.dims.size(); ++i) inverse[size_t(n.attrs.dims[i])] = i;
  return {ag::permute(g[0], inverse)};
}

Tensor expand(const Tensor& x, const Shape& shape) {
  return finish(maybe_node(Op::Expand, {&x}), dl::expand(x, shape));
}
// The engine sums the gradient back to the input's shape.
template <> Grads derivative<Op::Expand>(Node&, const TensorList& g) { return {g[0]}; }

// ---- joining ------------------------------------------------------------------------------

namespace {
Grads split_backward(Node& n, const TensorList& g, bool stacked) {
  int dim = int(n.attrs.i[0]);
  Grads out;
  int64_t at = 0;
  for (int i = 0; i < n.inputs.size(); ++i) {
    if (stacked) {
      out.push_back(n.next[i].valid() ? ag::select(g[0], dim, i) : Tensor());
    } else {
      int64_t len = n.inputs[i].shape.size() ? n.inputs[i].shape[dim] : 0;
      out.push_back(n.next[i].valid() && len > 0 ? ag::narrow(g[0], dim, at, len) : Tensor());
      at += len;
    }
  }
  return out;
}
}  // namespace

Tensor cat(const TensorList& xs, int dim) {
  Tensor y = dl::cat(xs, dim);
  Ref<Node> n = maybe_node("cat", derivative_of(Op::Cat), xs);
  if (!n) return y;
  n->attrs.i[0] = wrap_dim(dim, y.dim(), "cat");
  return finish(n, y);
}
template <> Grads derivative<Op::Cat>(Node& n, const TensorList& g) { return split_backward(n, g, false); }

Tensor stack(const TensorList& xs, int dim) {
  Tensor y = dl::stack(xs, dim);
  Ref<Node> n = maybe_node("stack", derivative_of(Op::Stack), xs);
  if (!n) return y;
  n->attrs.i[0] = wrap_dim(dim, y.dim(), "stack");
  return finish(n, y);
}
template <> Grads derivative<Op::Stack>(Node& n, const TensorList& g) { return split_backward(n, g, true); }

// ---- indexing ---------------------------------------------------------------------------------

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  Tensor y = dl::index_select(x, dim, index);
  Ref<Node> n = maybe_node(Op::IndexSelect, {&x});
  if (!n) return y;
  n->save(index);
  n->attrs.i[0] = wrap_dim(dim, x.dim(), "index_select");
  return finish(n, y);
}
template <> Grads derivative<Op::IndexSelect>(Node& n, const TensorList& g) {
  // index_add as a scatter_add with the index broadcast along the other dims.
  int dim = int(n.attrs.i[0]);
  Tensor idx = n.unpack(0);
  const Tensor& gy = g[0];
  Shape s;
  for (int d = 0; d < gy.dim(); ++d) s.push_back(d == dim ? gy.size(d) : 1);
  Tensor full_idx = dl::expand(dl::reshape(idx, s), gy.shape());  // read in place, stride 0
  return {ag::scatter_add(zeros(n.inputs[0].shape, gy.dtype(), gy.device()), dim, full_idx, gy)};
}

Tensor gather(const Tensor& x, int dim, const Tensor& index) {
  Tensor y = dl::gather(x, dim, index);
  Ref<Node> n = maybe_node(Op::Gather, {&x});
  if (!n) return y;
  n->save(index);
  n->attrs.i[0] = wrap_dim(dim, x.dim(), "gather");
  return finish(n, y);
}
template <> Grads derivative<Op::Gather>(Node& n, const TensorList& g) {
  int dim = int(n.attrs.i[0]);
  return {ag::scatter_add(zeros(n.inputs[0].shape, g[0].dtype(), g[0].device()), dim, n.unpack(0), g[0])};
}

Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  Tensor y = dl::scatter_add(x, dim, index, src);
  Ref<Node> n = maybe_node(Op::ScatterAdd, {&x, &src});
  if (!n) return y;
  n->save(index);
  n->attrs.i[0] = wrap_dim(dim, x.dim(), "scatter_add");
  return finish(n, y);
}
template <> Grads derivative<Op::ScatterAdd>(Node& n, const TensorList& g) {
  int dim = int(n.attrs.i[0]);
  Grads out(2);
  if (n.next[0].valid()) out[0] = g[0];
  if (n.next[1].valid()) out[1] = ag::gather(g[0], dim, n.unpack(0));
  return out;
}

// ---- matmul -----------------------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor y = dl::matmul(a, b);
  Ref<Node> n = maybe_node(Op::MatMul, {&a, &b});
  if (!n) return y;
  n->save(a);
  n->save(b);
  return finish(n, y);
}
namespace {
// A matrix stored transposed: its rows are the columns of a contiguous matrix, as a Linear
// layer's weight is in y = x W^T. Its gradient is made in that same layout, so that the
// transpose back to W's gradient is contiguous and the optimizer's fused step reads it
// as it is (a transposed gradient cost a copy of the whole weight per step: 7% of an MLP
// epoch on one thread).
bool stored_transposed(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 && t.stride(1) == t.size(0);
}
}  // namespace

template <> Grads derivative<Op::MatMul>(Node& n, const TensorList& grads) {
  // Treat 1-D operands as matrices (a row on the left, a column on the right), take the
  // matrix gradients, and let the engine sum broadcast batch dims away.
  Tensor a = n.unpack(0), b = n.unpack(1);
  Tensor g = grads[0];
  bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  Tensor am = a1 ? ag::unsqueeze(a, 0) : a;
  Tensor bm = b1 ? ag::unsqueeze(b, 1) : b;
  if (a1) g = ag::unsqueeze(g, b1 ? 0 : -2);
  if (b1) g = ag::unsqueeze(g, -1);
  Grads out(2);
  const bool plain = am.dim() == 2 && bm.dim() == 2;  // no batch dims to sum away
  if (n.next[0].valid()) {
    // ga = g b^T, or (b g^T)^T in a's layout
    Tensor ga = plain && stored_transposed(am)
                    ? ag::transpose(ag::matmul(bm, ag::transpose(g, -1, -2)), -1, -2)
                    : ag::matmul(g, ag::transpose(bm, -1, -2));
    ga = ag::sum_to(ga, am.shape());
    out[0] = a1 ? ag::reshape(ga, a.shape()) : ga;
  }
  if (n.next[1].valid() && bm.dim() == 2 && am.dim() > 2) {
    // A matrix b shared by a batch of a's (a layer's weight over a sequence): the sum of
    // the batch's a^T g is one product of the batch's rows stacked, (..., M, K) as
    // (B M, K), with g's as (B M, N), instead of B products into a (B, K, N) temporary
    // summed afterwards.
    int64_t rows = 1;
    for (int d = 0; d + 1 < am.dim(); ++d) rows *= am.size(d);
    Tensor a2 = ag::reshape(am, Shape{rows, am.size(am.dim() - 1)});
    Tensor g2 = ag::reshape(g, Shape{rows, g.size(g.dim() - 1)});
    Tensor gb = stored_transposed(bm) ? ag::transpose(ag::matmul(ag::transpose(g2, 0, 1), a2), 0, 1)
                                      : ag::matmul(ag::transpose(a2, 0, 1), g2);
    out[1] = b1 ? ag::reshape(gb, b.shape()) : gb;
  } else if (n.next[1].valid()) {
    // gb = a^T g, or (g^T a)^T in b's layout
    Tensor gb = plain && stored_transposed(bm)
                    ? ag::transpose(ag::matmul(ag::transpose(g, -1, -2), am), -1, -2)
                    : ag::matmul(ag::transpose(am, -1, -2), g);
    gb = ag::sum_to(gb, bm.shape());
    out[1] = b1 ? ag::reshape(gb, b.shape()) : gb;
  }
  return out;
}

}  // namespace dl::ag
