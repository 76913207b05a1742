// Front ends of the reductions, max/min with indices, softmax and sum_to: argument
// checks, result dtypes and shapes, output allocation. The folding itself is in the
// device kernels (tensor/cpu/reduce.cpp, gpu/), with its math in tensor/reduce_functors.h.
//
// Kernels always write the keepdim form of the result (size 1 at each reduced dim, so
// its strides say where each output goes); dropping those dims afterwards is a free
// view of the fresh contiguous tensor.
#include <cmath>
#include <string>

#include "tensor/backend.h"
#include "tensor/observe.h"
#include "tensor/half_ops.h"

namespace dl {

namespace {

// The backend entry `entry` for device `d`, or "op: not implemented for cuda" when the
// device's backend leaves it empty.
template <typename F>
F kernel(F Backend::*entry, Device d, const char* op) {
  F f = backend_for(d, op).*entry;
  if (!f) fail(ErrorKind::NotImplemented, op, ": not implemented for ", d.is_cuda() ? "cuda" : d.str());
  return f;
}

std::string list_str(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// The reduced dims, 0-based and sorted; every dim when `dims` is empty. A 0-dim tensor
// accepts dim 0 or -1, as PyTorch does, and has nothing to reduce over.
std::vector<int> reduced_dims(const Tensor& x, const std::vector<int>& dims, const char* op) {
  const int nd = x.dim();
  std::vector<int> out;
  if (dims.empty()) {
    for (int d = 0; d < nd; ++d) out.push_back(d);
    return out;
  }
  bool seen[kMaxDims] = {};
  for (int d : dims) {
    int w = wrap_dim(d, nd, op);
    DL_CHECK_KIND(Index, !seen[w], op, ": dimension ", pos(w), " appears more than once in the dims ",
                  list_str(dims));
    seen[w] = true;
  }
  for (int d = 0; d < nd; ++d)
    if (seen[d]) out.push_back(d);
  return out;
}

Shape keepdim_shape(const Tensor& x, const std::vector<int>& rd) {
  Shape s = x.shape();
  for (int d : rd) s[d] = 1;
  return s;
}

// `t` (contiguous, fresh) without the dims in `rd`, which all have size 1.
Tensor drop_dims(const Tensor& t, const std::vector<int>& rd) {
  if (rd.empty()) return t;
  Shape s;
  size_t j = 0;
  for (int d = 0; d < t.dim(); ++d) {
    if (j < rd.size() && rd[j] == d) { ++j; continue; }
    s.push_back(t.size(d));
  }
  return make_view(t, s, contiguous_strides(s), t.offset());
}

// PyTorch's result dtypes of the reductions.
DType reduce_dtype(Op op, DType t) {
  switch (op) {
    case Op::Sum: case Op::Prod: return is_floating(t) ? t : DType::Int64;
    case Op::Amax: case Op::Amin: return t;
    case Op::Any: case Op::All: return DType::Bool;
    default: return is_floating(t) ? t : default_float();  // kFloatOnly
  }
}

// Refuses an empty reduction for ops without an identity (amax, amin, the +-inf norms).
void check_nonempty(const Tensor& x, const std::vector<int>& rd, const char* op, const char* what) {
  for (int d : rd)
    DL_CHECK(x.size(d) != 0, op, ": cannot ", what, " over dimension ", pos(d), " of size 0 (tensor of shape ",
             x.shape(), "): the operation has no identity");
}

// 0-dim tensors are handled as shape (1,) by the dim-wise kernels.
Tensor as_1d(const Tensor& x) {
  return x.dim() == 0 ? make_view(x, Shape{1}, Shape{1}, x.offset()) : x;
}

}  // namespace

// ---- reductions ------------------------------------------------------------------------

namespace {
Tensor reduce_impl(Op op, const Tensor& x, const std::vector<int>& dims, bool keepdim,
              const ReduceOpts& opts) {
  if (is_half(x.dtype())) return narrowed(reduce_impl(op, widened(x), dims, keepdim, opts), x.dtype());
  const OpInfo& info = op_info(op);
  const char* name = info.lua_name;
  DL_CHECK(info.family == OpFamily::Reduce, "reduce: ", name, " is not a reduction");
  std::vector<int> rd = reduced_dims(x, dims, name);
  if (op == Op::Amax || op == Op::Amin) check_nonempty(x, rd, name, "reduce");
  if (op == Op::Norm) {
    DL_CHECK(!std::isnan(opts.p), "norm: the order p must be a number, got nan");
    if (std::isinf(opts.p))
      check_nonempty(x, rd, name, opts.p > 0 ? "compute the inf norm" : "compute the -inf norm");
  }
  if (op == Op::Var || op == Op::Std)
    DL_CHECK(std::isfinite(opts.correction), name, ": correction must be finite, got ",
             opts.correction);
  DType odt = reduce_dtype(op, x.dtype());
  Tensor xin = (info.flags & kFloatOnly) && !is_floating(x.dtype()) ? cast(x, odt) : x;
  Tensor out = empty(keepdim_shape(x, rd), odt, x.device(), name);
  kernel(&Backend::reduce, x.device(), name)(op, out, xin, rd, opts);
  return keepdim ? out : drop_dims(out, rd);
}
}  // namespace

Tensor reduce(Op op, const Tensor& x, const std::vector<int>& dims, bool keepdim,
              const ReduceOpts& opts) {
  return observed([&] { return reduce_impl(op, x, dims, keepdim, opts); },
                  [&](Observed& o) { o.fn = Fn::Reduce; o.op = op; o.in[0] = &x; o.nin = 1; o.dims = dims; o.keepdim = keepdim; o.opts = opts; });
}

// ---- max/min with indices, argmax/argmin -------------------------------------------------

namespace {

std::pair<Tensor, Tensor> arg_reduce(Op op, const Tensor& x, int dim, bool keepdim,
                                     bool want_values) {
  if (is_half(x.dtype())) return narrowed(arg_reduce(op, widened(x), dim, keepdim, want_values), x.dtype());
  // (max_dim and min_dim are the scripts' max(x, dim) and min(x, dim): named so)
  const char* name = op == Op::MaxDim ? "max" : op == Op::MinDim ? "min" : op_name(op);
  int d = wrap_dim(dim, x.dim(), name);
  Tensor x1 = as_1d(x);
  DL_CHECK(x1.size(d) != 0, name, ": cannot reduce over dimension ", pos(d),
           " of size 0 (tensor of shape ", x.shape(), "): the operation has no identity");
  Shape ks = x1.shape();
  ks[d] = 1;
  Tensor values = want_values ? empty(ks, x.dtype(), x.device(), name) : Tensor();
  Tensor indices = empty(ks, DType::Int64, x.device(), name);
  kernel(&Backend::arg_reduce, x.device(), name)(op, values, indices, x1, d);
  if (!keepdim || x.dim() == 0) {
    std::vector<int> rd{d};
    if (want_values) values = drop_dims(values, rd);
    indices = drop_dims(indices, rd);
  }
  return {values, indices};
}

Tensor arg_index(Op op, const Tensor& x, std::optional<int> dim, bool keepdim) {
  if (dim) return arg_reduce(op, x, *dim, keepdim, false).second;
  const char* name = op_name(op);
  DL_CHECK(x.numel() != 0, name, ": cannot take the ", name, " of an empty tensor (shape ",
           x.shape(), ")");
  // Over the flattened tensor: indices count in row-major order, whatever the strides.
  Tensor xc = contiguous(x);
  Tensor flat = make_view(xc, Shape{x.numel()}, Shape{1}, xc.offset());
  Tensor i = arg_reduce(op, flat, 0, false, false).second;
  if (!keepdim) return i;
  Shape ones;
  ones.resize(x.dim(), 1);
  return make_view(i, ones, contiguous_strides(ones), i.offset());
}

}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& x, int dim, bool keepdim) {
  return observed_other("max_dim", [&] { return arg_reduce(Op::MaxDim, x, dim, keepdim, true); },
                        [&](Observed& o, const auto&) { o.ins = {&x}; o.ints = {dim, keepdim}; });
}
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int dim, bool keepdim) {
  return observed_other("min_dim", [&] { return arg_reduce(Op::MinDim, x, dim, keepdim, true); },
                        [&](Observed& o, const auto&) { o.ins = {&x}; o.ints = {dim, keepdim}; });
}
Tensor argmax(const Tensor& x, std::optional<int> dim, bool keepdim) {
  return observed_other("argmax", [&] { return arg_index(Op::Argmax, x, dim, keepdim); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim.has_value(), dim.value_or(0), keepdim}; });
}
Tensor argmin(const Tensor& x, std::optional<int> dim, bool keepdim) {
  return observed_other("argmin", [&] { return arg_index(Op::Argmin, x, dim, keepdim); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim.has_value(), dim.value_or(0), keepdim}; });
}

// ---- softmax -------------------------------------------------------------------------------

namespace {
Tensor softmax_impl(Op op, const Tensor& x, int dim) {
  if (is_half(x.dtype())) return narrowed(softmax_impl(op, widened(x), dim), x.dtype());
  const char* name = op_name(op);
  int d = wrap_dim(dim, x.dim(), name);
  DType t = is_floating(x.dtype()) ? x.dtype() : default_float();
  Tensor xin = contiguous(as_1d(cast(x, t)));
  Tensor out = empty(x.shape(), t, x.device(), name);
  kernel(&Backend::softmax, x.device(), name)(op, as_1d(out), xin, d);
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int dim) {
  return observed_other("softmax", [&] { return softmax_impl(Op::Softmax, x, dim); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim}; });
}
Tensor log_softmax(const Tensor& x, int dim) {
  return observed_other("log_softmax", [&] { return softmax_impl(Op::LogSoftmax, x, dim); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim}; });
}

namespace {
Tensor softmax_backward_impl(const Tensor& g, const Tensor& y) {
  const char* op = "softmax";
  DL_CHECK(g.shape() == y.shape() && g.device() == y.device() && y.dim() >= 1 && y.is_floating(), op,
           ": the gradient's fused form needs g and y of one shape and device, floating, got ", g.shape(), " and ",
           y.shape());
  if (is_half(y.dtype())) return narrowed(softmax_backward(widened(g), widened(y)), y.dtype());
  Tensor gx = empty(y.shape(), y.dtype(), y.device(), op);
  kernel(&Backend::softmax_backward, y.device(), op)(gx, contiguous(cast(g, y.dtype())), contiguous(y));
  return gx;
}
}  // namespace

Tensor softmax_backward(const Tensor& g, const Tensor& y) {
  return observed_other("softmax_backward", [&] { return softmax_backward_impl(g, y); },
                        [&](Observed& o, const Tensor&) { o.ins = {&g, &y}; });
}

// ---- scans ---------------------------------------------------------------------------------

static Tensor scan_impl(Op op, const Tensor& x, int dim, bool reverse) {
  if (is_half(x.dtype())) return narrowed(scan_impl(op, widened(x), dim, reverse), x.dtype());
  const char* name = op_name(op);
  const int d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
  const DType t = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  Tensor out = empty(x.shape(), t, x.device(), name);
  if (x.numel() == 0) return out;
  Tensor xin = contiguous(as_1d(x));
  kernel(&Backend::scan, x.device(), name)(op, as_1d(out), xin, d, reverse);
  return out;
}

Tensor cumsum(const Tensor& x, int dim, bool reverse) {
  return observed_other("cumsum", [&] { return scan_impl(Op::Cumsum, x, dim, reverse); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim, reverse}; });
}

Tensor cumprod(const Tensor& x, int dim, bool reverse) {
  return observed_other("cumprod", [&] { return scan_impl(Op::Cumprod, x, dim, reverse); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim, reverse}; });
}

// ---- sum_to ----------------------------------------------------------------------------------

// The reverse of broadcasting x's shape from `shape`: leading extra dims and dims where
// `shape` has 1 are summed away in one reduction (keepdim, so the result is already laid
// out as `shape`). The dtype is kept: this is a gradient's shape change, not a sum whose
// integer results would widen to int64.
namespace {
Tensor sum_to_impl(const Tensor& x, const Shape& shape) {
  if (is_half(x.dtype()) && x.shape() != shape) return narrowed(sum_to_impl(widened(x), shape), x.dtype());
  if (x.shape() == shape) return x;
  const int lead = x.dim() - shape.size();
  DL_CHECK(lead >= 0, "sum_to: cannot sum a tensor of shape ", x.shape(),
           " to the shape ", shape, ", which has more dimensions");
  std::vector<int> dims;
  for (int d = 0; d < lead; ++d) dims.push_back(d);
  for (int i = 0; i < shape.size(); ++i) {
    int64_t have = x.size(lead + i);
    if (shape[i] == have) continue;
    DL_CHECK(shape[i] == 1, "sum_to: cannot sum a tensor of shape ", x.shape(), " to the shape ",
             shape, " (dimension ", pos(lead + i), " has size ", have, ", the target ", shape[i], ")");
    dims.push_back(lead + i);
  }
  Tensor r = reduce(Op::Sum, x, dims, true);
  if (r.dtype() != x.dtype()) r = cast(r, x.dtype());
  return make_view(r, shape, contiguous_strides(shape), r.offset());
}
}  // namespace

Tensor sum_to(const Tensor& x, const Shape& shape) {
  return observed([&] { return sum_to_impl(x, shape); },
                  [&](Observed& o) { o.fn = Fn::SumTo; o.in[0] = &x; o.nin = 1; o.shape = shape; });
}

}  // namespace dl
