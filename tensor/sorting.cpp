// Front ends of sorting and selection: the sorted dim moved last and made contiguous, a
// count read back before the non-zero positions are listed, rows for searchsorted; then
// one Backend call (tensor/cpu/sorting.cpp, gpu/sorting.cu). The rest of the family
// (argsort, topk, kthvalue, unique, masked_select, x[mask]) is Lua made of these,
// scripts/dlua/sorting.lua.
#include "tensor/backend.h"
#include "tensor/observe.h"
#include "tensor/half_ops.h"

namespace dl {

namespace {

std::pair<Tensor, Tensor> sort_impl(const Tensor& x, int dim, bool descending) {
  if (is_half(x.dtype())) return narrowed(sort_impl(widened(x), dim, descending), x.dtype());
  if (x.dim() == 0) return {clone(x), zeros(Shape{}, DType::Int64, x.device())};
  const int d = wrap_dim(dim, x.dim(), "sort");
  Tensor indices = empty(x.shape(), DType::Int64, x.device(), "sort");
  if (x.numel() == 0) return {clone(x), indices};
  // The sorted dim last, as rows: (R, n). Bool sorts as uint8 (false < true).
  Tensor moved = transpose(x.dtype() == DType::Bool ? cast(x, DType::UInt8) : x, d, -1);
  Tensor rows = contiguous(moved);
  const int64_t n = x.size(d);
  Tensor order = empty(rows.shape(), DType::Int64, x.device(), "sort");
  kernel(x.device(), &Backend::sort, "sort")(view(order, Shape{rows.numel() / n, n}), view(rows, Shape{rows.numel() / n, n}),
                                             descending);
  copy_(indices, transpose(order, d, -1));
  return {gather(x, d, indices), indices};
}

Tensor nonzero_impl(const Tensor& x) {
  if (is_half(x.dtype())) return nonzero_impl(widened(x));
  const int nd = std::max(x.dim(), 1);
  Tensor flags = contiguous(x.dim() == 0 ? view(x, Shape{1}) : x);
  int64_t count = 0;
  {
    Unobserved quiet;   // the count sizes the result; it is no part of what is computed
    count = int64_t(reduce(Op::Sum, compare(Op::Ne, flags, Scalar::integer(0)), {}, false).item());
  }
  Tensor out = empty(Shape{count, x.dim() == 0 ? 0 : nd}, DType::Int64, x.device(), "nonzero");
  if (count == 0 || x.dim() == 0) return out;
  kernel(x.device(), &Backend::nonzero, "nonzero")(out, flags);
  return out;
}

Tensor searchsorted_impl(const Tensor& seq, const Tensor& values, bool right) {
  if (any_half({&seq, &values})) return searchsorted_impl(widened(seq), widened(values), right);
  DL_CHECK(seq.device() == values.device(), "searchsorted: expected tensors on the same device, got ", seq.device(),
           " and ", values.device());
  DL_CHECK(seq.dim() >= 1, "searchsorted: expected a sorted sequence with at least 1 dimension, got shape ",
           seq.shape());
  DL_CHECK_KIND(Type, seq.dtype() != DType::Bool && values.dtype() != DType::Bool,
                "searchsorted: not supported for bool tensors");
  const int64_t n = seq.size(seq.dim() - 1);
  Tensor out = empty(values.shape(), DType::Int64, values.device(), "searchsorted");
  const DType dt = promote(seq.dtype(), values.dtype());
  Tensor s = contiguous(cast(seq, dt)), v = contiguous(cast(values, dt));
  int64_t rows = 1;
  if (seq.dim() > 1) {
    bool same = values.dim() == seq.dim();
    for (int i = 0; same && i + 1 < seq.dim(); ++i) same = seq.size(i) == values.size(i);
    DL_CHECK(same, "searchsorted: the leading dims of the sequence ", seq.shape(), " and of the values ", values.shape(),
             " must be equal (or the sequence 1-D)");
    rows = 1;
    for (int i = 0; i + 1 < seq.dim(); ++i) rows *= seq.size(i);
  }
  if (values.numel() == 0) return out;
  if (n == 0) {   // every value goes first
    backend_for(values.device(), "searchsorted").fill(out, 0);
    return out;
  }
  const int64_t m = values.numel() / rows;
  kernel(values.device(), &Backend::searchsorted, "searchsorted")(view(out, Shape{rows, m}), view(s, Shape{rows, n}),
                                                                  view(v, Shape{rows, m}), right);
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& x, int dim, bool descending) {
  return observed_other("sort", [&] { return sort_impl(x, dim, descending); }, [&](Observed& o, const auto&) {
    o.ins = {&x};
    o.ints = {dim, descending};
  });
}

Tensor nonzero(const Tensor& x) {
  return observed_other("nonzero", [&] { return nonzero_impl(x); }, [&](Observed& o, const Tensor&) { o.ins = {&x}; });
}

Tensor searchsorted(const Tensor& seq, const Tensor& values, bool right) {
  return observed_other("searchsorted", [&] { return searchsorted_impl(seq, values, right); },
                        [&](Observed& o, const Tensor&) {
                          o.ins = {&seq, &values};
                          o.ints = {right};
                        });
}

}  // namespace dl
