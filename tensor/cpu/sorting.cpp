// Sorting and selection on the CPU (contracts in tensor/kernels.def). Rows are independent
// and run on OpenMP's threads; each row is std::stable_sort over its indices with the
// shared order of tensor/sort_functors.h, so ties keep their positions and NaNs go last.
#include <algorithm>
#include <numeric>

#include "tensor/cpu/kernels.h"
#include "tensor/sort_functors.h"

namespace dl::cpu {

namespace {

template <typename T>
void sort_rows(const Tensor& indices, const Tensor& x, bool descending) {
  const int64_t R = x.size(0), n = x.size(1);
  const T* xs = x.data<T>();
  int64_t* is = indices.data<int64_t>();
#pragma omp parallel for schedule(dynamic, 1) if (R > 1 && R * n > 4096)
  for (int64_t r = 0; r < R; ++r) {
    const T* row = xs + r * n;
    int64_t* out = is + r * n;
    std::iota(out, out + n, int64_t(0));
    if (descending)
      std::stable_sort(out, out + n, [row](int64_t a, int64_t b) { return fn::less_nan_last(row[b], row[a]); });
    else
      std::stable_sort(out, out + n, [row](int64_t a, int64_t b) { return fn::less_nan_last(row[a], row[b]); });
  }
}

template <typename T>
void nonzero_of(const Tensor& out, const Tensor& x) {
  const int nd = x.dim();
  const T* xs = x.data<T>();
  int64_t* o = out.data<int64_t>();
  int64_t pos[kMaxDims] = {};
  for (int64_t i = 0, k = 0, n = x.numel(); i < n; ++i) {
    if (xs[i] != T(0)) {
      for (int d = 0; d < nd; ++d) o[k * nd + d] = pos[d];
      ++k;
    }
    for (int d = nd - 1; d >= 0; --d) {   // the next position, row-major
      if (++pos[d] < x.size(d)) break;
      pos[d] = 0;
    }
  }
}

template <typename T>
void search_rows(const Tensor& out, const Tensor& seq, const Tensor& values, bool right) {
  const int64_t R = seq.size(0), n = seq.size(1), m = values.size(1);
  const T* s = seq.data<T>();
  const T* v = values.data<T>();
  int64_t* o = out.data<int64_t>();
#pragma omp parallel for schedule(static) if (R * m > 4096)
  for (int64_t i = 0; i < R * m; ++i) o[i] = fn::insertion_point(s + (i / m) * n, n, v[i], right);
}

}  // namespace

void sort(const Tensor& indices, const Tensor& x, bool descending) {
  DL_DISPATCH_NUMERIC(x.dtype(), "sort", (sort_rows<scalar_t>(indices, x, descending)));
}

void nonzero(const Tensor& out, const Tensor& x) {
  DL_DISPATCH_ALL(x.dtype(), "nonzero", (nonzero_of<scalar_t>(out, x)));
}

void searchsorted(const Tensor& out, const Tensor& seq, const Tensor& values, bool right) {
  DL_DISPATCH_NUMERIC(seq.dtype(), "searchsorted", (search_rows<scalar_t>(out, seq, values, right)));
}

}  // namespace dl::cpu
