// CPU kernels of the indexing ops: cat, index_select, gather, scatter_add.
//
// The front ends (tensor/index.cpp) have checked shapes and dtypes and allocated `out`;
// the kernels check every index, since only they read the index values, and throw a
// dl::Error naming the op, the index and the size. Errors found inside a threaded
// region are recorded and thrown after it: an exception must not leave an OpenMP
// region. The geometry is handled with the loops of tensor/cpu/loops.h.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/functors.h"
#include "tensor/half.h"

namespace dl::cpu {

namespace {

[[noreturn]] void out_of_range(const char* op, int64_t index, int dim, int64_t size) {
  fail(ErrorKind::Index, op, ": index ", pos(index), " is out of range for dimension ", pos(dim),
       " of size ", size);
}

// Runs run(begin, end) over [0, n), split across threads when the total `work` (in
// elements touched) is worth it.
template <typename Run>
void parallel_for(int64_t n, int64_t work, Run&& run) {
  parallel_units(n, double(work), [&](int64_t b, int64_t e, int) { run(b, e); });
}

// The bad index at the lowest position (byte offset in the index tensor) among all
// that the threads meet. Every thread scans its whole range, so the one reported does
// not depend on the thread count or on the order of the loops.
class BadIndex {
 public:
  void record(int64_t pos, int64_t value) {
    if (pos >= pos_.load(std::memory_order_relaxed)) return;  // no lock on the common path
    std::lock_guard<std::mutex> lock(mu_);
    if (pos < pos_.load(std::memory_order_relaxed)) {
      pos_.store(pos, std::memory_order_relaxed);
      value_ = value;
    }
  }
  void throw_if_any(const char* op, int dim, int64_t size) const {
    if (pos_.load() != std::numeric_limits<int64_t>::max()) out_of_range(op, value_, dim, size);
  }

 private:
  std::mutex mu_;
  std::atomic<int64_t> pos_{std::numeric_limits<int64_t>::max()};
  int64_t value_ = 0;
};

// Operands walked along lines of `dim`, for gather and scatter_add. Every operand is
// viewed with the index's shape; make_operands over that shape with `dim` removed
// gives the outer positions (coalesced, split between threads), and each outer
// position owns one whole line along dim. Two threads therefore never write the same
// output line, which scatter_add relies on.
template <int N>
struct Lines {
  StridedOperands<N> outer;
  std::array<int64_t, N> step;  // bytes between neighbours along dim
  int64_t len = 0;              // the index's size along dim
};

template <int N>
Lines<N> make_lines(const std::array<const Tensor*, N>& ts, const Shape& shape, int dim) {
  Lines<N> g;
  Shape outer_sizes = shape;
  outer_sizes.erase(dim);
  std::array<Tensor, N> views;
  std::array<const Tensor*, N> ptrs;
  for (int k = 0; k < N; ++k) {
    Shape st = ts[k]->strides();
    // A step is only ever taken to a position below the operand's own size along dim:
    // for a size of 0 or 1, or an empty operand, none is, and the stride may be any
    // value (a saturated one from unsqueeze); scaled to bytes it could overflow.
    const bool steps = ts[k]->size(dim) > 1 && ts[k]->numel() > 0;
    g.step[k] = steps ? st[dim] * int64_t(ts[k]->itemsize()) : 0;
    st.erase(dim);
    // An empty operand (x empty along dim, where every index is out of range) is never
    // read; its other strides may be huge, e.g. (2^61, 1) for shape (2, 0, 2^61).
    if (ts[k]->numel() == 0)
      for (int d = 0; d < st.size(); ++d) st[d] = 0;
    views[k] = make_view(*ts[k], outer_sizes, st, ts[k]->offset());
    ptrs[k] = &views[k];
  }
  g.outer = make_operands<N>(ptrs);
  g.len = shape[dim];
  return g;
}

// Calls body(ptrs, outer_strides, n) for runs of n outer positions (see Lines).
template <int N, typename Body>
void for_each_line_run(const Lines<N>& g, Body&& body) {
  parallel_for(g.outer.numel, g.outer.numel * g.len,
               [&](int64_t b, int64_t e) { for_each_run<N>(g.outer, b, e, body); });
}

template <typename I>
inline int64_t index_at(const char* p) { return int64_t(*reinterpret_cast<const I*>(p)); }

// Visits (i, j) for the i < n outer positions of a run and the j < len positions along
// dim, with the loop of the smaller index stride innermost.
template <typename Visit>
void visit_block(int64_t n, int64_t len, bool line_inner, Visit&& visit) {
  if (line_inner) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < len; ++j) visit(i, j);
  } else {
    for (int64_t j = 0; j < len; ++j)
      for (int64_t i = 0; i < n; ++i) visit(i, j);
  }
}

// out = x gathered through `index` along dim (operands: out, index, x).
template <typename T, typename I>
void gather_impl(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  const int64_t size = x.size(dim);
  Lines<3> g = make_lines<3>({&out, &index, &x}, index.shape(), dim);
  BadIndex bad;
  for_each_line_run<3>(g, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s,
                              int64_t n) {
    visit_block(n, g.len, n == 1 || g.step[1] <= s[1], [&](int64_t i, int64_t j) {
      const char* ip = p[1] + i * s[1] + j * g.step[1];
      int64_t v = index_at<I>(ip);
      if (v < 0 || v >= size) {
        bad.record(ip - g.outer.data[1], v);
        return;
      }
      *reinterpret_cast<T*>(p[0] + i * s[0] + j * g.step[0]) =
          *reinterpret_cast<const T*>(p[2] + i * s[2] + v * g.step[2]);
    });
  });
  bad.throw_if_any("gather", dim, size);
}

// out[.. index ..] += src along dim, in place (operands: out, index, src).
template <typename T, typename I>
void scatter_add_impl(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  const int64_t size = out.size(dim);
  Lines<3> g = make_lines<3>({&out, &index, &src}, index.shape(), dim);
  BadIndex bad;
  for_each_line_run<3>(g, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s,
                              int64_t n) {
    visit_block(n, g.len, n == 1 || g.step[1] <= s[1], [&](int64_t i, int64_t j) {
      const char* ip = p[1] + i * s[1] + j * g.step[1];
      int64_t v = index_at<I>(ip);
      if (v < 0 || v >= size) {
        bad.record(ip - g.outer.data[1], v);
        return;
      }
      T* o = reinterpret_cast<T*>(p[0] + i * s[0] + v * g.step[0]);
      *o = fn::AddFn{}(*o, *reinterpret_cast<const T*>(p[2] + i * s[2] + j * g.step[2]));
    });
  });
  bad.throw_if_any("scatter_add", dim, size);
}

// Indices of a 1-D (or 0-dim) index tensor as int64, all checked against `size`.
template <typename I>
std::vector<int64_t> checked_indices(const Tensor& index, int64_t size, int dim, const char* op) {
  int64_t n = index.numel();
  int64_t st = index.dim() == 0 ? 0 : index.stride(0);
  const I* p = index.data<I>();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t v = int64_t(p[j * st]);
    if (v < 0 || v >= size) out_of_range(op, v, dim, size);
    idx[size_t(j)] = v;
  }
  return idx;
}

int64_t prod(const Shape& s, int from, int to) {
  int64_t r = 1;
  for (int i = from; i < to; ++i) r *= s[i];
  return r;
}

}  // namespace

void cat(const Tensor& out, const TensorList& xs, int dim) {
  // out is a fresh contiguous tensor: viewed as (outer, out.size(dim) * inner) rows,
  // each input fills a column block of every row.
  const int64_t outer = prod(out.shape(), 0, dim);
  const int64_t inner = prod(out.shape(), dim + 1, out.dim());
  const size_t isz = out.itemsize();
  const int64_t out_row = out.size(dim) * inner;
  char* base = static_cast<char*>(out.raw_data());
  int64_t at = 0;  // where along dim the next input goes
  for (const Tensor& x : xs) {
    // A row a memcpy each while rows are long; short ones (a stack along the last dim
    // copies one element a row) through the strided copy kernel, as one loop.
    const int64_t row = x.size(dim) * inner;
    if (x.dtype() == out.dtype() && x.is_contiguous() && row * int64_t(isz) >= 256) {
      const char* src = static_cast<const char*>(x.raw_data());
      parallel_for(outer, outer * row, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o)
          std::memcpy(base + (o * out_row + at * inner) * isz, src + o * row * isz, size_t(row) * isz);
      });
    } else {
      // Strided or of another dtype: the converting copy kernel into out's block.
      Tensor block = make_view(out, x.shape(), out.strides(), out.offset() + at * out.stride(dim));
      copy(block, x);
    }
    at += x.size(dim);
  }
}

void index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  const int64_t size = x.size(dim);
  std::vector<int64_t> idx;
  DL_DISPATCH_INDEX(index.dtype(), idx = checked_indices<index_t>(index, size, dim, "index_select"));
  if (out.numel() == 0) return;
  const int64_t n = int64_t(idx.size());
  if (x.is_contiguous() && out.is_contiguous()) {
    // Rows of `inner` elements, copied whole.
    const int64_t outer = prod(x.shape(), 0, dim);
    const int64_t inner = prod(x.shape(), dim + 1, x.dim());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    // Row r of the output is row (r / n) * size + idx[r % n] of x; each thread walks
    // its rows keeping (o, j) instead of dividing per row.
    auto rows = [&](auto copy_row) {
      parallel_for(outer * n, outer * n * inner, [&](int64_t b, int64_t e) {
        int64_t o = b / n, j = b % n;
        for (int64_t r = b; r < e; ++r) {
          copy_row(r, o * size + idx[size_t(j)]);
          if (++j == n) { j = 0; ++o; }
        }
      });
    };
    if (inner == 1) {  // single elements: a typed copy beats a memcpy call
      DL_DISPATCH_STORAGE(x.dtype(), "index_select", {
        const scalar_t* s = reinterpret_cast<const scalar_t*>(src);
        scalar_t* d = reinterpret_cast<scalar_t*>(dst);
        rows([&](int64_t r, int64_t from) { d[r] = s[from]; });
      });
    } else {
      const size_t row = size_t(inner) * x.itemsize();
      rows([&](int64_t r, int64_t from) { std::memcpy(dst + r * row, src + from * row, row); });
    }
    return;
  }
  // Any layout: a gather through the index broadcast over the other dims (the index
  // was already checked, so the gather's own checks cannot fail).
  Shape st;
  st.resize(out.dim());
  st[dim] = index.dim() == 0 ? 0 : index.stride(0);
  gather(out, x, dim, make_view(index, out.shape(), st, index.offset()));
}

void gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  DL_DISPATCH_STORAGE(x.dtype(), "gather",
      DL_DISPATCH_INDEX(index.dtype(), (gather_impl<scalar_t, index_t>(out, x, dim, index))));
}

void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  DL_DISPATCH_ALL(out.dtype(), "scatter_add",
      DL_DISPATCH_INDEX(index.dtype(), (scatter_add_impl<scalar_t, index_t>(out, dim, index, src))));
}


}  // namespace dl::cpu
