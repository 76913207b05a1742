// Host-side geometry that every backend's kernels share: how operands are walked, how a
// reduction splits its dims, how BLAS reads a matrix. The CPU kernels (tensor/cpu/) and
// the CUDA plugin (gpu/) compute these the same way from here, so that both walk a
// tensor in the same order; only the loops that run over them are their own.
#pragma once
#include <array>
#include <cstdint>

#include "tensor/tensor.h"
#include "tensor/half.h"   // (after tensor.h: it specialises dtype.h's dtype_of)

namespace dl::geometry {

// ---- pointwise operands ---------------------------------------------------------------------
// Fills g (any struct with data[N], sizes[d], strides[N][d], ndim and numel: the CPU's
// StridedOperands, the CUDA plugin's Geom) with operand 0 (the output) and the inputs
// broadcast to its shape: byte strides per dim (0 where an operand broadcasts), dims of
// size 1 dropped, and neighbours that every operand walks as one merged, so that a
// contiguous op is one flat dim. ndim is 0 for a single element; for no element at all
// only numel (0) is set, since an empty shape's strides may not scale to bytes (for
// (0, 2^62, 4) they overflow).
template <int N, typename G>
void coalesce(const std::array<const Tensor*, N>& ts, G& g) {
  const Shape& shape = ts[0]->shape();
  const int nd = shape.size();
  g.numel = ts[0]->numel();
  g.ndim = 0;
  if (g.numel == 0) return;
  for (int k = 0; k < N; ++k) {
    g.data[k] = static_cast<char*>(ts[k]->raw_data());
    const int off = nd - ts[k]->dim();
    const int64_t isz = int64_t(ts[k]->itemsize());
    for (int d = 0; d < nd; ++d) {
      const int dk = d - off;
      g.strides[k][d] = (dk < 0 || ts[k]->size(dk) == 1) ? 0 : ts[k]->stride(dk) * isz;
    }
  }
  int m = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    g.sizes[m] = shape[d];
    for (int k = 0; k < N; ++k) g.strides[k][m] = g.strides[k][d];
    ++m;
  }
  int w = 0;
  for (int d = 0; d < m; ++d) {
    if (w > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        if (g.strides[k][w - 1] != g.strides[k][d] * g.sizes[d]) {
          merge = false;
          break;
        }
      if (merge) {
        g.sizes[w - 1] *= g.sizes[d];
        for (int k = 0; k < N; ++k) g.strides[k][w - 1] = g.strides[k][d];
        continue;
      }
    }
    g.sizes[w] = g.sizes[d];
    for (int k = 0; k < N; ++k) g.strides[k][w] = g.strides[k][d];
    ++w;
  }
  g.ndim = w;
}

// ---- reductions -------------------------------------------------------------------------------
// x's dims split into kept (k*) and reduced (r*) ones, each outermost first, in
// elements: sizes, x's strides, and for kept dims the output's strides. Dims of size 1
// are dropped, the rest ordered by x's strides (memory order, stable for ties) and
// neighbours of one kind merged where both x and the output walk them as one. With
// nothing to reduce, one reduced dim of size 1 (every output reads one element).
// rzero is a zero stride for the CPU's odometers.
struct ReducePlan {
  int nk = 0, nr = 0;
  int64_t ks[kMaxDims] = {}, kxs[kMaxDims] = {}, kos[kMaxDims] = {};
  int64_t rs[kMaxDims] = {}, rxs[kMaxDims] = {}, rzero[kMaxDims] = {};
  int64_t nout = 1, nred = 1;
  bool red_innermost = false;   // the innermost dim in memory is reduced
};

// red[d]: whether x's dim d is reduced; out has x's dims (size 1 where reduced).
inline ReducePlan reduce_plan(const Tensor& out, const Tensor& x, const bool* red) {
  struct D {
    int64_t size, xs, os;
    bool red;
  };
  D v[kMaxDims];
  int n = 0;
  for (int d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    D cur{x.size(d), x.stride(d), red[d] ? 0 : out.stride(d), red[d]};
    int j = n++;
    while (j > 0 && v[j - 1].xs < cur.xs) {
      v[j] = v[j - 1];
      --j;
    }
    v[j] = cur;
  }
  int w = 0;
  for (int i = 0; i < n; ++i) {
    if (w > 0 && v[w - 1].red == v[i].red && v[w - 1].xs == v[i].xs * v[i].size &&
        v[w - 1].os == v[i].os * v[i].size) {
      v[w - 1].size *= v[i].size;
      v[w - 1].xs = v[i].xs;
      v[w - 1].os = v[i].os;
      continue;
    }
    v[w++] = v[i];
  }
  ReducePlan p;
  for (int i = 0; i < w; ++i) {
    if (v[i].red) {
      p.rs[p.nr] = v[i].size;
      p.rxs[p.nr++] = v[i].xs;
      p.nred *= v[i].size;
    } else {
      p.ks[p.nk] = v[i].size;
      p.kxs[p.nk] = v[i].xs;
      p.kos[p.nk++] = v[i].os;
      p.nout *= v[i].size;
    }
  }
  p.red_innermost = w > 0 && v[w - 1].red;
  if (p.nr == 0) {
    p.rs[0] = 1;
    p.rxs[0] = 0;
    p.nr = 1;
  }
  return p;
}

// ---- matrix products --------------------------------------------------------------------------
// How BLAS (or cuBLAS) can read a rows x cols matrix with element strides (sr, sc), if at
// all: row-major with leading dimension ld, or (trans) column-major.
struct MatLayout {
  bool ok = false;
  bool trans = false;  // stored column-major: element (i, j) at i + j * ld
  int64_t ld = 0;
  // Elements between (i, j) and (i + 1, j), and between (i, j) and (i, j + 1).
  int64_t row_step() const { return trans ? 1 : ld; }
  int64_t col_step() const { return trans ? ld : 1; }
};

// The dtypes a matrix product computes in: calls floating.template operator()<T>() for
// float32 and float64 (and float16, bfloat16 where the backend multiplies halves:
// kHalves), integral's for the integer dtypes; throws for the rest, naming matmul.
template <bool kHalves, typename Fl, typename In>
void dispatch_product(DType dt, Fl&& floating, In&& integral) {
  switch (dt) {
    case DType::Float32: floating.template operator()<float>(); return;
    case DType::Float64: floating.template operator()<double>(); return;
    case DType::Int64: integral.template operator()<int64_t>(); return;
    case DType::Int32: integral.template operator()<int32_t>(); return;
    case DType::UInt8: integral.template operator()<uint8_t>(); return;
    case DType::Float16:
      if constexpr (kHalves) return floating.template operator()<Half>();
      break;
    case DType::BFloat16:
      if constexpr (kHalves) return floating.template operator()<BFloat16>();
      break;
    case DType::Bool: break;
  }
  fail(ErrorKind::Type, "matmul: not implemented for dtype ", dtype_name(dt));
}

inline MatLayout mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  // The stride of a dim of size 1 is never used, so it does not disqualify a layout.
  const int64_t c1 = cols > 1 ? cols : 1, r1 = rows > 1 ? rows : 1;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= c1)) return {true, false, rows == 1 ? c1 : sr};
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= r1)) return {true, true, cols == 1 ? r1 : sc};
  return {};
}

}  // namespace dl::geometry
