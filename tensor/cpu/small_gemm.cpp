// Note [Small products of matrices]
// A float32 product of matrices with m n k <= kVolume (64 x 64 x 64 is a quarter of it;
// the MLP's second layer, 64 x 256 by 256 x 10, and an attention head's 128 x 64 by
// 64 x 96 are under it) runs in the loop below instead of OpenBLAS's sgemm. At these
// sizes OpenBLAS's fixed costs are a large part of its time: it first zeroes c (beta =
// 0), which on a result buffer last used a thousand products ago misses the cache, and
// copies both operands into its packed layouts; its kernel proper was about 70% of a
// 64 x 64 x 64 product. The loop reads a and b where they are and writes c once: a
// tile of c of R rows by NV vectors is held in registers while k runs, each element
// of a broadcast across the tile, each row of b's tile loaded once for all of its rows.
// Only b's columns must be contiguous: a b read transposed, and the last columns when
// n is not a multiple of the tile's width, are first copied into a tile of that width
// (zeros past n; a b read transposed in blocks of a vector's lanes square, transposed
// in registers); where those last columns fill half a tile or less, the tile is one
// vector wide. Larger products stay with OpenBLAS, whose blocking for the caches wins
// from about 128 x 128 x 128 with AVX2 (docs/performance.md, "Small products of
// matrices", has the measurements behind the limit; bench/ rows `matmul32` to
// `matmul128` and `mlpmm1` to `mlpmm5`). The AVX-512 build keeps up with OpenBLAS's
// SkylakeX kernels further, to 256 x 256 x 256 and the MLP's first layer (one thread,
// hot buffers), and beats their two threads once cut between the OpenMP threads
// (matmul.cpp's own_gemm; a cut changes no bit here): it takes float32 products to
// kWideVolume (256 x 256 x 256) where b's columns are contiguous or b is read
// transposed (its rows contiguous, copied in transposed blocks), and others to
// kVolume. A long k (over kDepth) with a narrow
// b also stays with OpenBLAS, and so do products with a vector operand (Note [Small
// products without OpenBLAS] in matmul.cpp has those). A program whose products are
// all this small never loads OpenBLAS (Note [Loading OpenBLAS on first use] in
// openblas.cpp).
//
// Every element is the same chain of fused multiply-adds whatever the build and the
// layouts:
//   c(i, j) = fma(a(i, k-1), b(k-1, j), ... fma(a(i, 1), b(1, j), fma(a(i, 0), b(0, j), 0)))
// one rounding per term, as BLAS's kernels round (though in their own blocking of k, so
// the two still differ in the last bits). Each term is an explicit fused multiply-add
// (`fused` below), not left to the compiler's contraction of `acc += a * b`, which GCC
// does from -O2 only: the sanitizer build (-O1) gave other bits. Without fused
// multiply-adds the loop had half the arithmetic rate of OpenBLAS's kernels, which left
// it at 0.35 of sgemm on an AVX-512 machine (docs/performance.md). The builds, each
// keeping its tile in the registers it has:
//   AVX-512: 16 floats (8 doubles) a vector, tiles of 12 rows x 2 vectors (24 of 32
//            registers), 12 x 1 for a narrow last tile;
//   AVX2 with FMA: 8 floats a vector, 6 x 2 (12 of 16 registers), 12 x 1 narrow;
//   elsewhere (not x86-64): the baseline's vectors, 6 x 2 and 6 x 1, each lane's
//            multiply-add a std::fma (one instruction on every ARMv8 CPU).
// An x86-64 CPU without AVX2 and FMA (the baseline build there cannot fuse) leaves
// every product to OpenBLAS, as does a test that limits the vector width to 16 bytes
// (limit_vector_bytes in loops.h). A float64 tile holds half the columns, and with AVX2
// OpenBLAS's dgemm is as fast from about 64 x 64 x 64: float64 products use the AVX2
// build up to 32 x 32 x 32 (kVolume), the AVX-512 one, at or above dgemm's rate up to
// 96^3 (docs/performance.md), up to kVolume<float>.
#include "tensor/cpu/small_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/cpu/vec.h"

namespace dl::cpu {

namespace {

template <typename T>
constexpr int64_t kVolume = sizeof(T) == 4 ? int64_t(1) << 20 : int64_t(1) << 15;
constexpr int64_t kWideVolume = int64_t(1) << 24;   // float32 with AVX-512, b's rows or columns contiguous
constexpr int64_t kDepth = 4096;   // the longest k the loop takes
constexpr int64_t kAheadBytes = int64_t(32) << 10;   // Note [Results out of cache]

// acc + a b in every lane, rounded once. With GCC on x86-64 one instruction, written
// out: the builds' functions have the target attributes, and GCC inlines no intrinsic
// into the templates they share; "v" is the vector register of V's width (xmm, ymm or
// zmm). Clang checks an asm's operands before inlining, so there the expression is
// contracted on purpose (llvm.fmuladd, one instruction where the target has FMA, at
// every optimisation level).
template <typename V>
[[gnu::always_inline]] inline V fused(V acc, V a, V b) {
#if defined(__clang__)
#pragma clang fp contract(on)
  acc = acc + a * b;
#elif defined(DL_WIDTH_BUILDS)
  if constexpr (sizeof(a[0]) == 4) asm("vfmadd231ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  else asm("vfmadd231pd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
#else
  for (int l = 0; l < int(sizeof(V) / sizeof(a[0])); ++l) acc[l] = std::fma(a[l], b[l], acc[l]);
#endif
  return acc;
}

// c's rows 0..R-1 of a tile `cols` columns wide (cols <= NV lanes; b's tile is always
// that wide): a(r, p) = a[r ars + p aks], b(p, j) = b[p ldb + j].
template <typename T, int VB, int R, int NV>
[[gnu::always_inline]] inline void tile(const T* a, int64_t ars, int64_t aks, const T* b, int64_t ldb, T* c,
                                        int64_t ldc, int64_t k, int cols) {
  using V = typename Vec<T, VB>::V;
  constexpr int L = Vec<T, VB>::kLanes;
  V acc[R][NV] = {};
  for (int64_t p = 0; p < k; ++p) {
    V bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = load<VB>(b + p * ldb + v * L);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      // a(r, p) in every lane: added to -0, which leaves every value as it is (-0 and
      // NaN included), so the addition folds away and a(r, p) is broadcast from memory.
      // (`x + V{}` must add, +0 turning -0 into +0; lanes set one by one, or a helper
      // function compiled outside this build's target, are assembled lane by lane.)
      const V av = a[r * ars + p * aks] + -V{};
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = fused(acc[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    if (cols == NV * L) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) store<VB>(c + r * ldc + v * L, acc[r][v]);
    } else {
      T row[NV * L];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) store<VB>(row + v * L, acc[r][v]);
      std::memcpy(c + r * ldc, row, size_t(cols) * sizeof(T));
    }
  }
}

// The last `rows` (< R) rows of c for one tile of columns.
template <typename T, int VB, int R, int NV>
[[gnu::always_inline]] inline void last_rows(int64_t rows, const T* a, int64_t ars, int64_t aks, const T* b,
                                             int64_t ldb, T* c, int64_t ldc, int64_t k, int cols) {
  if constexpr (R > 1) {
    if (rows == R - 1) return tile<T, VB, R - 1, NV>(a, ars, aks, b, ldb, c, ldc, k, cols);
    last_rows<T, VB, R - 1, NV>(rows, a, ars, aks, b, ldb, c, ldc, k, cols);
  }
}

// Asks for the lines of `rows` rows of c, `cols` elements each, to be written (a row
// need not start a line: its last element's line too).
template <typename T>
[[gnu::always_inline]] inline void prefetch_rows(T* c, int64_t ldc, int64_t rows, int cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int e = 0; e < cols; e += int(64 / sizeof(T))) __builtin_prefetch(c + r * ldc + e, 1, 3);
    __builtin_prefetch(c + r * ldc + cols - 1, 1, 3);
  }
}

// All m rows of c for one tile of columns. With `ahead`, the next tile's rows of c are
// asked for while this one computes (Note [Results out of cache]).
template <typename T, int VB, int R, int NV>
[[gnu::always_inline]] inline void columns(const T* a, int64_t ars, int64_t aks, const T* b, int64_t ldb, T* c,
                                           int64_t ldc, int64_t m, int64_t k, int cols, bool ahead) {
  int64_t i = 0;
  if (ahead) prefetch_rows(c, ldc, std::min<int64_t>(R, m), cols);
  for (; i + R <= m; i += R) {
    if (ahead) prefetch_rows(c + (i + R) * ldc, ldc, std::min<int64_t>(R, m - i - R), cols);
    tile<T, VB, R, NV>(a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, k, cols);
  }
  if (i < m) last_rows<T, VB, R, NV>(m - i, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, k, cols);
}

// Rows x and y of an L x L block, block size B: the B x B block right of the diagonal
// in x's pair of rows swapped with the one left of it in y's (Eklundh's transpose: for
// B = L/2, L/4, ..., 1 over every pair of rows B apart, it transposes the block).
template <int L, int B, typename V, std::size_t... I>
[[gnu::always_inline]] inline void swap_blocks(V& x, V& y, std::index_sequence<I...>) {
  const V lo = __builtin_shufflevector(x, y, (I / B % 2 == 0 ? int(I) : int(L + I - B))...);
  const V hi = __builtin_shufflevector(x, y, (I / B % 2 == 0 ? int(I + B) : int(L + I))...);
  x = lo;
  y = hi;
}
template <int L, int B, typename V>
[[gnu::always_inline]] inline void transpose_stage(V* v) {
  if constexpr (B >= 1) {
#pragma GCC unroll 16
    for (int i = 0; i < L; ++i)
      if (i / B % 2 == 0) swap_blocks<L, B>(v[i], v[i + B], std::make_index_sequence<L>{});
    transpose_stage<L, B / 2>(v);
  }
}

// copy (k x width, row-major) = b(p, q) for q < cols and 0 for cols <= q < width, from a
// b whose columns are rows in memory (b(p, q) = b[p + q bjs], b read transposed): blocks
// of L x L transposed in registers, a last block of fewer columns with zero rows in their
// place, the last rows (k mod L) element by element. width is L or 2L, and at most L past
// cols. (Element by element throughout, the copy was a fifth of a 64 x 784 by 784 x 256
// product's time; a last block of fewer columns element by element made a 64 x 256 by
// 256 x 10 one take longer: docs/performance.md, "Small products of matrices".)
template <typename T, int VB>
[[gnu::always_inline]] inline void pack_transposed(const T* b, int64_t bjs, int64_t k, int cols, int width, T* copy) {
  constexpr int L = Vec<T, VB>::kLanes;
  using V = typename Vec<T, VB>::V;
  for (int q = 0; q < width; q += L) {
    const int lanes = std::max(0, std::min(L, cols - q));   // this block's columns of b
    int64_t p = 0;
    for (; p + L <= k; p += L) {
      V v[L];
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) v[i] = i < lanes ? load<VB>(b + (q + i) * bjs + p) : V{};
      transpose_stage<L, L / 2>(v);
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) store<VB>(copy + (p + i) * width + q, v[i]);
    }
    for (; p < k; ++p)
      for (int i = 0; i < L; ++i) copy[size_t(p * width + q + i)] = i < lanes ? b[(q + i) * bjs + p] : T(0);
  }
}

// The whole product, tiles of R rows by two vectors, and RN rows by one for a narrow
// last tile.
template <typename T, int VB, int R, int RN>
[[gnu::always_inline]] inline void body(const T* a, int64_t ars, int64_t aks, const T* b, int64_t bks, int64_t bjs,
                                        T* c, int64_t ldc, int64_t m, int64_t n, int64_t k) {
  constexpr int W = 2 * Vec<T, VB>::kLanes;
  static_assert(kSmallGemmRowCut % R == 0 && kSmallGemmRowCut % RN == 0 && kSmallGemmColumnCut % W == 0,
                "a cut of the product into parts would split a tile");
  // Note [Results out of cache]
  // A product's result is usually fresh memory that is out of cache: the collector frees
  // results in batches (Note [Stepping the collector] in scripts/dlua/lifetime.lua), so
  // the block a result takes was last written many megabytes ago, and a tile's stores
  // wait for its lines. A result larger than the first-level cache has the next tile's
  // lines asked for while a tile computes: 256 x 256 x 256 and 64 x 256 by 256 x 10
  // took less time (one thread, a C++ program cycling 256 results); a 64 x 64 one, whose
  // 16 KB stay in the second-level cache, more, and has none (docs/performance.md,
  // "Small products of matrices").
  const bool ahead = m * n * int64_t(sizeof(T)) > kAheadBytes;
  int64_t j = 0;
  if (bjs == 1)
    for (; j + W <= n; j += W) columns<T, VB, R, 2>(a, ars, aks, b + j, bks, c + j, ldc, m, k, W, ahead);
  if (j == n) return;
  // The copy's room is the thread's, kept for its next product (at most kDepth x W
  // elements: 512 KB).
  thread_local std::vector<T> room;
  if (room.size() < size_t(k) * W) room.resize(size_t(k) * W);
  T* const copy = room.data();
  for (; j < n; j += W) {
    const int cols = int(std::min<int64_t>(W, n - j));
    const int width = cols <= W / 2 ? W / 2 : W;
    if (bks == 1) {
      pack_transposed<T, VB>(b + j * bjs, bjs, k, cols, width, copy);
    } else {
      // The lanes past the last column are zeros, stored as vectors over the whole tile
      // first (a short fill per row became a `rep stos` each: 30% of a 64 x 256 by 256 x
      // 10 product's time by perf).
      if (cols < width)
        for (int64_t e = 0; e < k * width; e += Vec<T, VB>::kLanes) store<VB>(copy + e, typename Vec<T, VB>::V{});
      for (int64_t p = 0; p < k; ++p)
        for (int q = 0; q < cols; ++q) copy[size_t(p * width + q)] = b[p * bks + (j + q) * bjs];
    }
    if (width == W) columns<T, VB, R, 2>(a, ars, aks, copy, W, c + j, ldc, m, k, cols, ahead);
    else columns<T, VB, RN, 1>(a, ars, aks, copy, W / 2, c + j, ldc, m, k, cols, ahead);
  }
}

#if defined(DL_WIDTH_BUILDS)
template <typename T>
DL_TARGET_AVX512 void gemm_avx512(const T* a, int64_t ars, int64_t aks, const T* b, int64_t bks, int64_t bjs, T* c,
                                  int64_t ldc, int64_t m, int64_t n, int64_t k) {
  body<T, 64, 12, 12>(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
}
template <typename T>
__attribute__((target("avx2,fma"))) void gemm_avx2(const T* a, int64_t ars, int64_t aks, const T* b, int64_t bks,
                                                   int64_t bjs, T* c, int64_t ldc, int64_t m, int64_t n, int64_t k) {
  body<T, 32, 6, 12>(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
}

// The widest build this CPU runs (and vector_bytes() allows), or 0: none.
int build_bytes() {
  static const bool fma = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  const int bytes = vector_bytes();
  return bytes >= 32 && fma ? bytes : 0;
}
#else
int build_bytes() { return 16; }
#endif

template <typename T>
void run(const T* a, int64_t ars, int64_t aks, const T* b, int64_t bks, int64_t bjs, T* c, int64_t ldc, int64_t m,
         int64_t n, int64_t k) {
#if defined(DL_WIDTH_BUILDS)
  if (build_bytes() == 64) return gemm_avx512(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
  return gemm_avx2(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
#else
  body<T, 16, 6, 6>(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
#endif
}

}  // namespace

template <typename T>
bool small_gemm_takes(int64_t m, int64_t n, int64_t k, int64_t bks, int64_t bjs) {
  const int bytes = build_bytes();
  const bool rows_or_columns = bjs == 1 || bks == 1;  // b in place, or transposed in blocks
  const int64_t most = bytes != 64 ? kVolume<T> : sizeof(T) == 4 && rows_or_columns ? kWideVolume : kVolume<float>;
  // (each size bounded before the product of the three is formed)
  return bytes != 0 && m > 1 && n > 1 && k <= kDepth && m <= most && n <= most && m * n * k <= most;
}
template bool small_gemm_takes<float>(int64_t, int64_t, int64_t, int64_t, int64_t);
template bool small_gemm_takes<double>(int64_t, int64_t, int64_t, int64_t, int64_t);

void small_gemm(const float* a, int64_t ars, int64_t aks, const float* b, int64_t bks, int64_t bjs, float* c,
                int64_t ldc, int64_t m, int64_t n, int64_t k) {
  run(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
}
void small_gemm(const double* a, int64_t ars, int64_t aks, const double* b, int64_t bks, int64_t bjs, double* c,
                int64_t ldc, int64_t m, int64_t n, int64_t k) {
  run(a, ars, aks, b, bks, bjs, c, ldc, m, n, k);
}

}  // namespace dl::cpu
