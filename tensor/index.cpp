// Front ends of the indexing ops: cat, stack, index_select, gather, scatter_add.
//
//   Tensor y = cat({a, b}, 0);                       // a on top of b
//   Tensor p = gather(logp, 1, labels.view({-1, 1}));   // logp[i][labels[i]]
//
// Shape and dtype rules are PyTorch's (with 0-based dims). The device kernels
// (Backend::cat, index_select, gather, scatter_add) check the index values, since
// only they read them. A 0-dim input is handled here as a 1-D tensor of one element,
// so the kernels always see at least one dim.
#include <algorithm>

#include "tensor/observe.h"
#include "tensor/backend.h"
#include "tensor/half_ops.h"

namespace dl {

namespace {

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  DL_CHECK(a.device() == b.device(), op, ": expected ", what, " on the same device as the input (",
           a.device(), "), got ", b.device());
}

void check_index_dtype(const Tensor& index, const char* op) {
  DL_CHECK_KIND(Type, index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op,
                ": expected an int64 or int32 index, got ", dtype_name(index.dtype()));
}

// x itself, or a 1-D view of one element for a 0-dim x.
Tensor at_least_1d(const Tensor& x) {
  return x.dim() == 0 ? make_view(x, Shape{1}, Shape{1}, x.offset()) : x;
}

// PyTorch's legacy cat rule: a 1-D tensor with no elements joins anything (it is
// what `torch.Tensor()` made, used to start accumulations).
bool skipped_in_cat(const Tensor& x) { return x.dim() == 1 && x.size(0) == 0; }

}  // namespace

static Tensor cat_impl(const TensorList& xs, int dim) {
  DL_CHECK(!xs.empty(), "cat: expected a non-empty list of tensors");
  // result_type over the list; no 0-dim tensor can take part, so it is plain promotion.
  DType dt = xs[0].dtype();
  int ref = -1;  // the first tensor that is not skipped: the others must match it
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    DL_CHECK(x.defined(), "cat: tensor ", pos(i), " in the list is undefined");
    DL_CHECK(x.dim() > 0, "cat: zero-dimensional tensor (at position ", pos(i), ") cannot be concatenated");
    check_same_device(xs[0], x, "cat", "every tensor");
    dt = promote(dt, x.dtype());
    if (ref < 0 && !skipped_in_cat(x)) ref = int(i);
  }
  if (ref < 0) return empty(Shape{0}, dt, xs[0].device(), "cat");
  const Tensor& r = xs[size_t(ref)];
  const int n = r.dim();
  const int d = wrap_dim(dim, n, "cat");
  Shape shape = r.shape();
  shape[d] = 0;
  TensorList parts;
  parts.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (skipped_in_cat(x)) continue;
    DL_CHECK(x.dim() == n, "cat: tensors must have the same number of dimensions, but tensor ", pos(ref),
             " has shape ", r.shape(), " and tensor ", pos(i), " has shape ", x.shape());
    for (int k = 0; k < n; ++k)
      DL_CHECK(k == d || x.size(k) == r.size(k), "cat: shapes must match except in dimension ", pos(d),
               ", but tensor ", pos(ref), " has shape ", r.shape(), " and tensor ", pos(i), " has shape ",
               x.shape());
    DL_CHECK(x.size(d) <= (int64_t(1) << 62) - shape[d], "cat: the result is too large");
    shape[d] += x.size(d);
    if (x.numel() > 0) parts.push_back(x);
  }
  Tensor out = empty(shape, dt, r.device(), "cat");
  if (out.numel() > 0) kernel(out.device(), &Backend::cat, "cat")(out, parts, d);
  return out;
}

Tensor cat(const TensorList& xs, int dim) {
  return observed_other("cat", [&] { return cat_impl(xs, dim); }, [&](Observed& o, const Tensor&) {
    for (const Tensor& x : xs) o.ins.push_back(&x);
    o.ints = {dim};
  });
}

static Tensor stack_impl(const TensorList& xs, int dim) {
  DL_CHECK(!xs.empty(), "stack: expected a non-empty list of tensors");
  const Tensor& first = xs[0];
  DL_CHECK(first.defined(), "stack: tensor ", pos(0), " in the list is undefined");
  const int d = wrap_dim(dim, first.dim() + 1, "stack");
  TensorList parts;
  parts.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    DL_CHECK(xs[i].defined(), "stack: tensor ", pos(i), " in the list is undefined");
    DL_CHECK(xs[i].shape() == first.shape(), "stack: expects tensors of equal shape, but tensor ", pos(0),
             " has shape ", first.shape(), " and tensor ", pos(i), " has shape ", xs[i].shape());
    check_same_device(first, xs[i], "stack", "every tensor");
    parts.push_back(unsqueeze(xs[i], d));
  }
  return cat(parts, d);
}

Tensor stack(const TensorList& xs, int dim) {
  return observed_other("stack", [&] { return stack_impl(xs, dim); }, [&](Observed& o, const Tensor&) {
    for (const Tensor& x : xs) o.ins.push_back(&x);
    o.ints = {dim};
  });
}

static Tensor index_select_impl(const Tensor& x, int dim, const Tensor& index) {
  check_index_dtype(index, "index_select");
  DL_CHECK(index.dim() <= 1, "index_select: expected a 1-D index, got shape ", index.shape());
  check_same_device(x, index, "index_select", "the index");
  const int d = wrap_dim(dim, x.dim(), "index_select");
  const int64_t n = index.numel();
  if (x.dim() == 0)
    DL_CHECK(n == 1, "index_select: the index into a 0-dim tensor must have one element, got ", n);
  Tensor xv = at_least_1d(x);
  Shape shape = xv.shape();
  shape[d] = n;
  Tensor out = empty(x.dim() == 0 ? Shape{} : shape, x.dtype(), x.device(), "index_select");
  if (n == 0) return out;
  // The kernel still runs when another dim is 0: every index must be checked.
  kernel(x.device(), &Backend::index_select, "index_select")(at_least_1d(out), xv, d, index);
  return out;
}

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  return observed_other("index_select", [&] { return index_select_impl(x, dim, index); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x, &index}; o.ints = {dim}; });
}

static Tensor gather_impl(const Tensor& x, int dim, const Tensor& index) {
  check_index_dtype(index, "gather");
  check_same_device(x, index, "gather", "the index");
  DL_CHECK(std::max(index.dim(), 1) == std::max(x.dim(), 1), "gather: index of shape ", index.shape(),
           " must have as many dimensions as the input of shape ", x.shape());
  const int d = wrap_dim(dim, x.dim(), "gather");
  Tensor xv = at_least_1d(x), iv = at_least_1d(index);
  for (int k = 0; k < xv.dim(); ++k)
    DL_CHECK(k == d || iv.size(k) <= xv.size(k), "gather: index of shape ", index.shape(),
             " is larger than the input of shape ", x.shape(), " at dimension ", pos(k),
             " (only dimension ", pos(d), " may be larger)");
  Tensor out = empty(index.shape(), x.dtype(), x.device(), "gather");
  if (out.numel() == 0) return out;
  kernel(x.device(), &Backend::gather, "gather")(at_least_1d(out), xv, d, iv);
  return out;
}

Tensor gather(const Tensor& x, int dim, const Tensor& index) {
  return observed_other("gather", [&] { return gather_impl(x, dim, index); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x, &index}; o.ints = {dim}; });
}

static Tensor scatter_add_impl(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  if (any_half({&x, &src})) return narrowed(scatter_add_impl(widened(x), dim, index, widened(src)), storage_of({&x, &src}));
  check_index_dtype(index, "scatter_add");
  check_same_device(x, index, "scatter_add", "the index");
  check_same_device(x, src, "scatter_add", "src");
  DL_CHECK_KIND(Type, src.dtype() == x.dtype(), "scatter_add: expected src of dtype ",
                dtype_name(x.dtype()), " (the input's), got ", dtype_name(src.dtype()));
  const int n = std::max(x.dim(), 1);
  DL_CHECK(std::max(index.dim(), 1) == n && std::max(src.dim(), 1) == n,
           "scatter_add: input of shape ", x.shape(), ", index of shape ", index.shape(),
           " and src of shape ", src.shape(), " must have the same number of dimensions");
  const int d = wrap_dim(dim, x.dim(), "scatter_add");
  Tensor out = clone(x);
  // PyTorch checks nothing more when there is nothing to scatter.
  if (index.numel() == 0) return out;
  Tensor xv = at_least_1d(x), iv = at_least_1d(index), sv = at_least_1d(src);
  for (int k = 0; k < n; ++k) {
    DL_CHECK(iv.size(k) <= sv.size(k), "scatter_add: index of shape ", index.shape(),
             " is larger than src of shape ", src.shape(), " at dimension ", pos(k));
    DL_CHECK(k == d || iv.size(k) <= xv.size(k), "scatter_add: index of shape ", index.shape(),
             " is larger than the input of shape ", x.shape(), " at dimension ", pos(k),
             " (only dimension ", pos(d), " may be larger)");
  }
  kernel(x.device(), &Backend::scatter_add, "scatter_add")(at_least_1d(out), d, iv, sv);
  return out;
}

Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  return observed_other("scatter_add", [&] { return scatter_add_impl(x, dim, index, src); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x, &index, &src}; o.ints = {dim}; });
}

}  // namespace dl
