// The reduction family, recorded: forwards and derivatives side by side.
#include <cmath>
#include <cstdint>

#include "autograd/math.h"
#include "autograd/record.h"
#include "tensor/observe.h"

namespace dl::ag {

using namespace math;

namespace {
// The reduced dims of `x` (all when `dims` is empty), sorted and wrapped.
Shape reduced_dims(const Shape& xshape, const std::vector<int>& dims, const char* op) {
  Shape out;
  int nd = xshape.size();
  if (dims.empty()) {
    for (int d = 0; d < nd; ++d) out.push_back(d);
    return out;
  }
  bool seen[kMaxDims] = {};
  for (int d : dims) seen[wrap_dim(d, nd, op)] = true;
  for (int d = 0; d < nd; ++d) if (seen[d]) out.push_back(d);
  return out;
}

// g (the gradient of a reduction without keepdim) reshaped so it broadcasts against x.
Tensor unreduce(const Tensor& g, const Shape& xshape, const Shape& dims, bool keepdim) {
  if (keepdim || xshape.size() == 0) return g;
  Shape s = xshape;
  for (int64_t d : dims) s[int(d)] = 1;
  return ag::reshape(g, s);
}

// The number of elements each result element reduced. Past 2^63 (only an empty x's
// sizes multiply that far, and then the gradient is empty) it saturates.
int64_t count_of(const Shape& xshape, const Shape& dims) {
  int64_t c = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(c, xshape[int(d)], &c)) return INT64_MAX;
  return c;
}
}  // namespace

Tensor reduce(Op op, const Tensor& x, const std::vector<int>& dims, bool keepdim, const ReduceOpts& opts) {
  Tensor y = dl::reduce(op, x, dims, keepdim, opts);
  Ref<Node> n = maybe_node(op, {&x});
  if (!n) return y;
  // Sum and Mean need only shapes; the others read the input and the result.
  if (op != Op::Sum && op != Op::Mean) {
    n->save(x);
    n->save(y, true);
  }
  n->attrs.dims = reduced_dims(x.shape(), dims, op_name(op));
  n->attrs.i[0] = keepdim;
  n->attrs.d[0] = op == Op::Norm ? opts.p : opts.correction;
  return finish(n, y);
}

namespace {
struct Red {
  Tensor x, y, g;  // g and y broadcastable against x (x, y: only when saved)
  Shape shape;     // the input's
  int64_t count;
};
Red unpack_reduction(Node& n, const TensorList& grads) {
  Red r;
  r.shape = n.inputs[0].shape;
  bool keep = n.attrs.i[0] != 0;
  if (n.saved.size() == 2) {
    r.x = n.unpack(0);
    r.y = unreduce(n.unpack(1), r.shape, n.attrs.dims, keep);
  }
  r.g = unreduce(grads[0], r.shape, n.attrs.dims, keep);
  r.count = count_of(r.shape, n.attrs.dims);
  return r;
}

// amax/amin: the gradient is shared evenly among the elements equal to the result.
Grads extremum_backward(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  Tensor hit = mask(ag::compare(Op::Eq, r.x, r.y), r.g);
  std::vector<int> dims = dims_of(n.attrs);
  Tensor count = ag::reduce(Op::Sum, hit, dims, true);
  return {r.g * hit / count};
}
}  // namespace

template <> Grads derivative<Op::Sum>(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  return {ag::expand(r.g, r.shape)};
}
template <> Grads derivative<Op::Mean>(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  return {ag::expand(r.g / double(r.count), r.shape)};
}
template <> Grads derivative<Op::Prod>(Node& n, const TensorList& grads) {
  // prod / x where x != 0; where x has zeros, the product of the others, computed by
  // replacing the zeros with ones (exact when a slice holds a single zero; slices
  // with two or more zeros have a zero gradient, which this also gives).
  Red r = unpack_reduction(n, grads);
  Tensor zero = ag::compare(Op::Eq, r.x, Scalar(0.0));
  Tensor x1 = ag::where(zero, ones(Shape{}, r.x.dtype(), r.x.device()), r.x);
  std::vector<int> dims = dims_of(n.attrs);
  Tensor others = ag::reduce(Op::Prod, x1, dims, true);
  Tensor nzeros = ag::reduce(Op::Sum, mask(zero, r.x), dims, true);
  // Elementwise: zeros in the slice other than this element.
  Tensor other_zeros = nzeros - mask(zero, r.x);
  Tensor p = ag::where(zero, others, others / x1);
  Tensor ok = ag::compare(Op::Eq, other_zeros, Scalar(0.0));
  return {r.g * p * mask(ok, r.x)};
}
template <> Grads derivative<Op::Amax>(Node& n, const TensorList& g) { return extremum_backward(n, g); }
template <> Grads derivative<Op::Amin>(Node& n, const TensorList& g) { return extremum_backward(n, g); }
template <> Grads derivative<Op::Var>(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  Tensor mean = ag::reduce(Op::Mean, r.x, dims_of(n.attrs), true);
  return {r.g * (r.x - mean) * (2.0 / (double(r.count) - n.attrs.d[0]))};
}
template <> Grads derivative<Op::Std>(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  Tensor mean = ag::reduce(Op::Mean, r.x, dims_of(n.attrs), true);
  // A slice whose std is zero (constant, or one element) gets a zero gradient, as
  // PyTorch's masked one, from a divisor of 1 there (no 0 / 0 at any order); where
  // count - correction is not positive, NaN stays, as there.
  Tensor y = ag::where(ag::compare(Op::Eq, r.y, Scalar(0.0)), ones(Shape{}, r.y.dtype(), r.y.device()), r.y);
  Tensor nonzero = mask(ag::compare(Op::Ne, r.y, Scalar(0.0)), r.y);
  return {r.g * nonzero * (r.x - mean) / (y * (double(r.count) - n.attrs.d[0]))};
}
template <> Grads derivative<Op::Norm>(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  double p = n.attrs.d[0];
  if (p == 1) return {r.g * sign(r.x)};
  if (p == 0) return {r.g * 0.0 * r.x};
  if (std::isinf(p)) {
    Tensor hit = mask(ag::compare(Op::Eq, abs(r.x), r.y), r.g);
    Tensor count = ag::reduce(Op::Sum, hit, dims_of(n.attrs), true);
    return {r.g * sign(r.x) * hit / count};
  }
  // A slice whose norm is zero gets a zero gradient, and so do the gradient's own
  // derivatives there (PyTorch's masked scale). The divisor is 1 there rather than 0,
  // so that no 0 * inf appears at any order.
  Tensor zero = ag::compare(Op::Eq, r.y, Scalar(0.0));
  Tensor y = ag::where(zero, ones(Shape{}, r.y.dtype(), r.y.device()), r.y);
  Tensor nonzero = mask(ag::compare(Op::Ne, r.y, Scalar(0.0)), r.y);
  if (p == 2) return {r.x * (r.g * nonzero / y)};
  // sign(x) |x|^(p-1) is x |x|^(p-2) without its inf at x = 0 for 1 < p < 2. Below 1,
  // |x|^(p-1) is infinite at x = 0 itself: those entries get 0 (PyTorch's masked fill),
  // from an |x| of 1 there, so that no 0 * inf appears at any order.
  Tensor ax = abs(r.x);
  if (p < 1) ax = ag::where(ag::compare(Op::Eq, r.x, Scalar(0.0)), ones(Shape{}, r.x.dtype(), r.x.device()), ax);
  return {sign(r.x) * pow(ax, p - 1) * (r.g * nonzero / pow(y, p - 1))};
}
template <> Grads derivative<Op::Logsumexp>(Node& n, const TensorList& grads) {
  Red r = unpack_reduction(n, grads);
  return {r.g * exp(r.x - r.y)};
}

// ---- max/min over a dim: gradient to the selected index -------------------------------

namespace {
Tensor scatter_back(const Tensor& g, const Tensor& x, int dim, const Tensor& idx, bool keepdim) {
  Tensor gi = keepdim ? g : ag::unsqueeze(g, dim);
  Tensor ii = keepdim ? idx : dl::unsqueeze(idx, dim);
  return ag::scatter_add(zeros(x.shape(), g.dtype(), g.device()), dim, ii, gi);
}
std::pair<Tensor, Tensor> record_extremum_dim(Op op, std::pair<Tensor, Tensor> r, const Tensor& x,
                                              int dim, bool keepdim) {
  Ref<Node> n = maybe_node(op, {&x});
  if (!n) return r;
  n->save(r.second);
  n->attrs.i[0] = wrap_dim(dim, x.dim(), op_name(op));
  n->attrs.i[1] = keepdim;
  n->attrs.shape = x.shape();
  n->num_outputs = 2;
  r.first = finish(n, r.first, 0);
  return r;
}
Grads extremum_dim_backward(Node& n, const TensorList& g) {
  Tensor idx = n.unpack(0);
  Tensor x = zeros(n.attrs.shape, g[0].dtype(), g[0].device());
  return {scatter_back(g[0], x, int(n.attrs.i[0]), idx, n.attrs.i[1] != 0)};
}
}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& x, int dim, bool keepdim) {
  return record_extremum_dim(Op::MaxDim, dl::max_dim(x, dim, keepdim), x, dim, keepdim);
}
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int dim, bool keepdim) {
  return record_extremum_dim(Op::MinDim, dl::min_dim(x, dim, keepdim), x, dim, keepdim);
}
template <> Grads derivative<Op::MaxDim>(Node& n, const TensorList& g) { return extremum_dim_backward(n, g); }
template <> Grads derivative<Op::MinDim>(Node& n, const TensorList& g) { return extremum_dim_backward(n, g); }

// ---- scans ---------------------------------------------------------------------------------

// The gradient of running sums is the running sums of the gradient the other way.
Tensor cumsum(const Tensor& x, int dim, bool reverse) {
  Tensor y = dl::cumsum(x, dim, reverse);
  Ref<Node> n = is_floating(x.dtype()) ? maybe_node(Op::Cumsum, {&x}) : Ref<Node>();
  if (!n) return y;
  n->attrs.i[0] = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "cumsum");
  n->attrs.i[1] = reverse;
  return finish(n, y);
}
template <> Grads derivative<Op::Cumsum>(Node& n, const TensorList& g) {
  return {ag::cumsum(g[0], int(n.attrs.i[0]), n.attrs.i[1] == 0)};
}

// The gradient of running products y = cumprod(x) along a dim: grad_i = the sum over
// j >= i of g_j * prod(x_k, k <= j, k != i), as PyTorch's cumprod_backward computes it.
//   - First order (nothing records): O(n). Where x_i is not 0 it is
//     reversed-cumsum(g y)_i / x_i; at a line's first zero z it is the reversed cumsum of
//     g y' at z, with y' the running products of x with that zero taken as 1; at a later
//     zero every product holds the first one: 0.
//   - When the gradient is itself differentiated (recording), the values are the same,
//     but a later zero's 0 depends on the first zero's value: the product for each i is
//     formed explicitly, O(n^2) per line, as PyTorch does for double backward.
Tensor cumprod(const Tensor& x, int dim, bool reverse) {
  Tensor y = dl::cumprod(x, dim, reverse);
  Ref<Node> n = is_floating(x.dtype()) ? maybe_node(Op::Cumprod, {&x}) : Ref<Node>();
  if (!n) return y;
  n->save(x);
  n->save(y, true);
  n->attrs.i[0] = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "cumprod");
  n->attrs.i[1] = reverse;
  return finish(n, y);
}

namespace {
// sum over j >= i of g_j prod(x_k, k <= j, k != i), in recorded ops: for each i, the
// running products of x with x_i taken as 1, masked to j >= i (reverse: the mirror).
Tensor cumprod_grad_explicit(const Tensor& x, const Tensor& g, int d, bool reverse) {
  const int last = x.dim() - 1;
  Tensor xs = ag::transpose(x, d, last), gs = ag::transpose(g, d, last);   // the line last
  const int64_t n = xs.size(last);
  Tensor eye = dl::eye(n, n, x.dtype(), x.device());                       // (i, k)
  Tensor hit = dl::compare(Op::Ne, eye, Scalar(0.0));
  Tensor rows = ag::where(hit, dl::ones(Shape{n, n}, x.dtype(), x.device()), ag::unsqueeze(xs, last));   // (..., i, k)
  Tensor c = ag::cumprod(rows, last + 1, reverse);                                                     // (..., i, j)
  Tensor r = dl::view(dl::arange(0, double(n), 1, DType::Int64, x.device()), Shape{n, 1});
  Tensor cl = dl::view(dl::arange(0, double(n), 1, DType::Int64, x.device()), Shape{1, n});
  Tensor keep = dl::cast(dl::compare(reverse ? Op::Le : Op::Ge, cl, r), x.dtype());   // j >= i (or <=)
  Tensor sum = ag::reduce(Op::Sum, c * keep * ag::unsqueeze(gs, last), {last + 1}, false);
  return ag::transpose(sum, d, last);
}
}  // namespace

template <> Grads derivative<Op::Cumprod>(Node& n, const TensorList& g) {
  Tensor x = n.unpack(0), y = n.unpack(1);
  const int d = int(n.attrs.i[0]);
  const bool reverse = n.attrs.i[1] != 0;
  if (x.dim() == 0) return {g[0]};
  Tensor zero = dl::compare(Op::Eq, x, Scalar(0.0));
  if (is_recording() && dl::reduce(Op::Any, zero, {}, false).item() != 0)
    return {cumprod_grad_explicit(x, g[0], d, reverse)};
  Tensor seen = dl::cumsum(zero, d, reverse);   // zeros so far along the scan, this one included
  Tensor nonzero = dl::compare(Op::Ne, x, Scalar(0.0));
  Tensor first = dl::compare(Op::Logical_and, zero, dl::compare(Op::Eq, seen, Scalar::integer(1)));
  Tensor ones = dl::ones(x.shape(), x.dtype(), x.device()), none = dl::zeros(x.shape(), x.dtype(), x.device());
  Tensor standard = ag::cumsum(g[0] * y, d, !reverse) / ag::where(nonzero, x, ones);
  Tensor gx = ag::where(nonzero, standard, none);
  if (dl::reduce(Op::Any, first, {}, false).item() != 0) {
    Tensor y1 = ag::cumprod(ag::where(first, ones, x), d, reverse);
    gx = gx + ag::where(first, ag::cumsum(g[0] * y1, d, !reverse), none);
  }
  return {gx};
}

// ---- sorting ----------------------------------------------------------------------------------

// The values are x's elements moved: their gradient goes back to where each came from.
std::pair<Tensor, Tensor> sort(const Tensor& x, int dim, bool descending) {
  auto r = dl::sort(x, dim, descending);
  Ref<Node> n = is_floating(x.dtype()) ? maybe_node(Op::Sort, {&x}) : Ref<Node>();
  if (!n) return r;
  n->save(r.second);
  n->attrs.i[0] = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "sort");
  n->attrs.shape = x.shape();
  n->num_outputs = 2;   // the indices carry no gradient
  r.first = finish(n, r.first, 0);
  return r;
}
template <> Grads derivative<Op::Sort>(Node& n, const TensorList& g) {
  Tensor idx = n.unpack(0);
  if (n.attrs.shape.size() == 0) return {g[0]};
  return {ag::scatter_add(zeros(n.attrs.shape, g[0].dtype(), g[0].device()), int(n.attrs.i[0]), idx, g[0])};
}

// ---- softmax family ---------------------------------------------------------------------

Tensor softmax(const Tensor& x, int dim) {
  Tensor y = dl::softmax(x, dim);
  Ref<Node> n = maybe_node(Op::Softmax, {&x});
  if (!n) return y;
  n->save(y, true);
  n->attrs.i[0] = wrap_dim(dim, x.dim(), "softmax");
  return finish(n, y);
}
template <> Grads derivative<Op::Softmax>(Node& n, const TensorList& g) {
  Tensor y = n.unpack(0);
  int d = int(n.attrs.i[0]);
  // One pass a row (Note [Softmax's gradient in one pass] in tensor/cpu/reduce.cpp) when
  // the formula need not be recorded or seen as ops.
  if (d == y.dim() - 1 && !is_recording() && !observing_formulas() && g[0].dtype() == y.dtype())
    return {dl::softmax_backward(g[0], y)};
  return {y * (g[0] - ag::reduce(Op::Sum, g[0] * y, {d}, true))};
}

Tensor log_softmax(const Tensor& x, int dim) {
  Tensor y = dl::log_softmax(x, dim);
  Ref<Node> n = maybe_node(Op::LogSoftmax, {&x});
  if (!n) return y;
  n->save(y, true);
  n->attrs.i[0] = wrap_dim(dim, x.dim(), "log_softmax");
  return finish(n, y);
}
template <> Grads derivative<Op::LogSoftmax>(Node& n, const TensorList& g) {
  Tensor y = n.unpack(0);
  int d = int(n.attrs.i[0]);
  return {g[0] - exp(y) * ag::reduce(Op::Sum, g[0], {d}, true)};
}

// ---- sum_to: the reverse of broadcasting ---------------------------------------------------

namespace {
Grads sum_to_backward(Node& n, const TensorList& g) { return {ag::expand(g[0], n.attrs.shape)}; }
}  // namespace

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  Tensor y = dl::sum_to(x, shape);
  Ref<Node> n = maybe_node("sum_to", sum_to_backward, {&x});
  if (!n) return y;
  n->attrs.shape = x.shape();
  return finish(n, y);
}

}  // namespace dl::ag
