// CPU matmul: float32/float64 products through OpenBLAS, the small ones in the engine's
// own loop (Note [Small products of matrices] in small_gemm.cpp); a plain loop with int64
// accumulation for the integer dtypes.
//
// Contract (tensor/kernels.def): out is a fresh contiguous (batch..., M, N); a is
// (..., M, K) and b (..., K, N), both at least 2-D, in out's dtype, with batch dims
// that broadcast to out's (missing or of size 1); M, N, K and the batch are non-empty.
//
// No operand is copied when its matrices are row-major or transposed-contiguous:
// BLAS reads either layout through CblasNoTrans/CblasTrans and a leading dimension.
// Broadcast batch dims are read in place through a zero stride. A batch that b does
// not vary over and that continues a's rows is folded into M: one gemm call, as
// PyTorch does for (B, M, K) x (K, N). Products from a few MFLOP up are split between
// OpenMP threads here, each part a one-thread BLAS call (Note [Products split between
// OpenMP threads]); OpenBLAS's own threads only run what cannot be split.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/openblas.h"
#include "tensor/cpu/small_gemm.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/vec.h"
#include "tensor/geometry.h"

namespace dl::cpu {

namespace {

using geometry::MatLayout;   // how BLAS can read a matrix (tensor/geometry.h)
MatLayout layout_of(int64_t rows, int64_t cols, int64_t sr, int64_t sc) { return geometry::mat_layout(rows, cols, sr, sc); }

MatLayout layout_of(const Tensor& t) {
  int n = t.dim();
  return layout_of(t.size(n - 2), t.size(n - 1), t.stride(n - 2), t.stride(n - 1));
}

// A copy of `t` whose matrices are row-major. Broadcast batch dims (stride 0) stay
// broadcast: only the distinct matrices are copied.
Tensor compact(const Tensor& t) {
  const int n = t.dim();
  Shape sizes = t.shape();
  for (int i = 0; i < n - 2; ++i)
    if (t.stride(i) == 0) sizes[i] = 1;
  Tensor c = empty(sizes, t.dtype(), t.device(), "matmul");
  copy(c, make_view(t, sizes, t.strides(), t.offset()));
  Shape strides = c.strides();
  for (int i = 0; i < n - 2; ++i)
    if (t.stride(i) == 0) strides[i] = 0;
  return make_view(c, t.shape(), strides, 0);
}

// Batch geometry: out's batch dims, and the element strides of a and b over them
// (0 where the operand broadcasts).
struct Batches {
  int n = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t sa[kMaxDims] = {};
  int64_t sb[kMaxDims] = {};
  int64_t count = 1;
};

int64_t batch_stride(const Tensor& t, int i, int n) {
  int ti = i - (n - (t.dim() - 2));
  return (ti < 0 || t.size(ti) == 1) ? 0 : t.stride(ti);
}

Batches batches_of(const Tensor& out, const Tensor& a, const Tensor& b) {
  Batches g;
  g.n = out.dim() - 2;
  for (int i = 0; i < g.n; ++i) {
    g.sizes[i] = out.size(i);
    g.sa[i] = batch_stride(a, i, g.n);
    g.sb[i] = batch_stride(b, i, g.n);
    g.count *= g.sizes[i];
  }
  return g;
}

// Calls f(batch, a_offset, b_offset) for every batch in row-major order.
template <typename F>
void for_each_batch(const Batches& g, F&& f) {
  int64_t idx[kMaxDims] = {};
  int64_t oa = 0, ob = 0;
  for (int64_t k = 0; k < g.count; ++k) {
    f(k, oa, ob);
    for (int d = g.n - 1; d >= 0; --d) {
      oa += g.sa[d];
      ob += g.sb[d];
      if (++idx[d] < g.sizes[d]) break;
      oa -= g.sa[d] * g.sizes[d];
      ob -= g.sb[d] * g.sizes[d];
      idx[d] = 0;
    }
  }
}

// Every batch's operand offsets (a's in oa, b's in ob), in batch order: for sharing the
// batches, or their rows, out between threads.
void batch_offsets(const Batches& g, std::vector<int64_t>& oa, std::vector<int64_t>& ob) {
  oa.resize(size_t(g.count));
  ob.resize(size_t(g.count));
  for_each_batch(g, [&](int64_t k, int64_t x, int64_t y) {
    oa[size_t(k)] = x;
    ob[size_t(k)] = y;
  });
}

// Note [BLAS threads]
// OpenBLAS splits a product over its own threads from about 64^3 multiply-adds up. On
// two cores shared with other processes, a split product of a small model's layer sizes
// keeps waiting for a helper thread that has been preempted: the MLP's steps took many
// times longer split than on one thread while other processes ran (bench/, `mlp`;
// docs/performance.md, "Measurements behind the code"). So OpenBLAS runs a product on
// one thread, except one of kSplitFlops or more that the engine cannot split between
// OpenMP threads itself (Note [Products split between OpenMP threads]): that one runs
// on as many threads as OpenBLAS started with (OPENBLAS_NUM_THREADS, or the core
// count). 2^25 flops is a 256^3 product, where two threads beat one on a quiet machine
// (bench/, `matmul256`).
constexpr double kSplitFlops = double(int64_t(1) << 25);

// OpenBLAS's thread count for the largest products (0: the count it starts with, read
// at the first product), and the count it has now (0: not known yet).
std::atomic<int> g_blas_configured{0};
std::atomic<int> g_blas_current{0};

void blas_threads_for(double flops) {
  // The count OpenBLAS started with, read before this changes it.
  int configured = g_blas_configured.load(std::memory_order_relaxed);
  if (configured == 0) {
    g_blas_configured.compare_exchange_strong(configured, openblas().openblas_get_num_threads());
    configured = g_blas_configured.load();
  }
  const int want = flops < kSplitFlops ? 1 : configured;
  if (g_blas_current.load(std::memory_order_relaxed) != want) {
    openblas().openblas_set_num_threads(want);
    g_blas_current.store(want, std::memory_order_relaxed);
  }
}

// Note [Products split between OpenMP threads]
// A product from kOmpSplitFlops up is cut along the larger of the output's dims into
// one part per OpenMP thread, each part a one-thread BLAS call: OpenMP's threads are the
// ones the elementwise kernels keep busy (and warm) between the products, and a part is
// still a sizeable product. (One-thread products left the other core idle through a
// small model's whole training step: the 784-256-10 MLP's products are 26 MFLOP each.)
// Large products too, rather than on OpenBLAS's own threads: the two pools then took
// turns on the same cores, OpenMP's workers spinning for milliseconds after each
// region (libgomp's default) while OpenBLAS's threads waited for a core, and
// OpenBLAS's yielding while OpenMP's did. With every product on OpenMP's threads,
// bench/'s `lstm` row (products of 17 MFLOP a step and of 1 GFLOP a sequence) and the
// matmul rows against OpenBLAS's own two threads improved (docs/performance.md,
// "Measurements behind the code").
//
// The cut depends on the shapes and the thread count only; whether the parts then run
// on several threads or one after another on this one is decided apart, and changes no
// bit. It matters: OpenBLAS does not give a row the same bits in a part as in the whole
// (a part's size can pick another kernel, e.g. SkylakeX's sgemm_direct below about
// 7 million multiply-adds, and a row's place in the kernel's tiles changes where the
// edge code runs), so a product cut or kept whole as the machine's load decided gave
// other last bits from one call to the next, and a compiled function other bits than
// eager (docs/compile.md promises the same). The parts run in order on this thread
// inside another parallel region (a conv's per-sample threads call BLAS too), and when
// the timed regions say another process holds a core (Note [Throttling parallel
// regions under contention] in loops.h): with one busy process beside it on two cores,
// the MLP's epoch took many times longer with every such product split than with none
// (bench/, `mlp`).
constexpr double kOmpSplitFlops = double(int64_t(1) << 22);
RegionThrottle g_split_throttle;

// Whether work may be shared out between OpenMP threads now: there are several, this is
// not inside another parallel region, and the contention throttle allows it.
bool may_share_out() {
  if (max_threads() < 2) return false;
#ifdef _OPENMP
  if (omp_in_parallel()) return false;
#endif
  return g_split_throttle.allowed(monotonic_ns());
}

// The number of parts an m x n x k product is cut into: one per OpenMP thread, or 1
// (whole) when it is too small or too narrow to cut.
int product_parts(int m, int n, int k) {
  const int threads = max_threads();
  if (threads < 2 || m < 2 || n < 2) return 1;
  const double flops = 2.0 * m * n * k;
  return flops >= kOmpSplitFlops && std::max(m, n) >= 64 * threads ? threads : 1;
}

// A batch of products each too small to split (attention's (L, E) x (E, S) per head: 2
// MFLOP for bench/'s sdpa row) but worth splitting together: the batch's products are
// shared out between OpenMP threads, each a one-thread BLAS call (or the engine's own
// loop, Note [Small products of matrices] in small_gemm.cpp), as the parts of a split
// product are (and timed by the same throttle). Each product is the same call either
// way, so the bits do not change. Not for products under kBatchSplitMinFlops of work:
// the char transformer's per-head products (64 x 16 x 64, 131 KFLOP, 64 a batch) were
// no faster shared out on the busy benchmark machine, and likely slower (bench/
// `chartf`; docs/performance.md, "Measurements behind the code").
//
// The work of a product counts its multiply-adds and its result: an element written
// counts as kStoreFlops. A product with a short k is as slow as its result is large:
// the per-example weight gradients of dl.vmap(dl.grad(f)) are outer products (bench/
// `pergrad`: 64 of (128, 1) by (1, 784)), each under kBatchSplitMinFlops of arithmetic
// but with a fresh result to write, and writing them all on one thread was most of the
// call. A float32 written to fresh memory takes a core the time of tens of the own
// loop's flops; 16 keeps the attention products of small heads where they were
// (docs/performance.md, "Per-example gradients: dl.vmap").
constexpr double kBatchSplitMinFlops = double(int64_t(1) << 20);
constexpr double kStoreFlops = 16;
double product_work(int64_t m, int64_t n, int64_t k) {
  return double(m) * double(n) * (2.0 * double(k) + kStoreFlops);
}
bool batches_between_threads(int64_t count, int64_t m, int64_t n, int64_t k) {
  const double work = product_work(m, n, k);
  return count >= 2 && work >= kBatchSplitMinFlops && 2.0 * double(m) * double(n) * double(k) < kOmpSplitFlops &&
         work * double(count) >= kOmpSplitFlops && may_share_out();
}

template <typename T> struct Blas;
template <> struct Blas<float> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a,
                   int lda, const float* b, int ldb, float* c, int ldc) {
    openblas().cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  }
  static void gemv(CBLAS_TRANSPOSE t, int m, int n, const float* a, int lda, const float* x, int incx,
                   float* y) {
    openblas().cblas_sgemv(CblasRowMajor, t, m, n, 1.0f, a, lda, x, incx, 0.0f, y, 1);
  }
  static float dot(int n, const float* x, int incx, const float* y, int incy) {
    return openblas().cblas_sdot(n, x, incx, y, incy);
  }
};
template <> struct Blas<double> {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a,
                   int lda, const double* b, int ldb, double* c, int ldc) {
    openblas().cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  }
  static void gemv(CBLAS_TRANSPOSE t, int m, int n, const double* a, int lda, const double* x,
                   int incx, double* y) {
    openblas().cblas_dgemv(CblasRowMajor, t, m, n, 1.0, a, lda, x, incx, 0.0, y, 1);
  }
  static double dot(int n, const double* x, int incx, const double* y, int incy) {
    return openblas().cblas_ddot(n, x, incx, y, incy);
  }
};

CBLAS_TRANSPOSE op(const MatLayout& l) { return l.trans ? CblasTrans : CblasNoTrans; }

// Note [Small products without OpenBLAS]
// A product with a vector operand whose matrix has at most kOwnVectorElems elements (a
// small model's layers on one example: 784 x 256 is 200,704) runs in the two loops
// below instead of OpenBLAS's gemv and dot. The loops read the matrix once, as gemv
// does, and keep up with it (docs/performance.md, the `runinfer` row); what they buy is
// that a program running such models never loads OpenBLAS (Note [Loading OpenBLAS on
// first use] in openblas.cpp): a game's per-frame inference starts milliseconds sooner.
// Larger ones stay with OpenBLAS. From kParallelGrain elements c is split between the
// OpenMP threads (rows for rows_dot, columns for rows_axpy), which changes no sum.
// The price, measured with bench/ (`gemv`; docs/performance.md, "Measurements behind
// the code"): on one core the loop is as fast as OpenBLAS's sgemv with AVX-512, and
// takes a little longer with AVX2 (no fused multiply-adds here); OpenBLAS runs that
// size on two threads where it may, faster, and splitting the loop between OpenMP
// threads made it slower on these shared cores, so it stays on one. A program saves
// the time of loading OpenBLAS instead.
//   rows_dot:  y[i] = sum_j a(i, j) x[j]   (a row-major: the rows are contiguous)
//   rows_axpy: y[j] = sum_i x[i] a(i, j)   (the same layout read as a's transpose)
// Both add in a fixed order whatever the instruction set (DL_TARGET_CLONES, and Note
// [Builds for each vector width] in loops.h): rows_dot keeps 16 running sums per row,
// element j in sum j % 16, then adds them pairwise; rows_axpy adds the rows in order.
// Each works on several rows at a time (the loads of x or y shared, the chains of
// additions independent), which changes no sum.
// Strided vectors are gathered first.
constexpr int64_t kOwnVectorElems = int64_t(1) << 20;

// A row's 16 running sums as vectors of VB bytes (Note [Builds for each vector width] in
// loops.h): one AVX-512 vector of floats or two of doubles, two or four AVX2 ones, four
// or eight SSE ones; the same sums in every case. kRows rows at a time, so that their
// sums fit in registers with the loads beside them.
template <typename T, int VB>
struct Sums16 {
  using V = typename Vec<T, VB>::V;
  static constexpr int kLanes = Vec<T, VB>::kLanes;
  static constexpr int kVectors = 16 / kLanes;
  static constexpr int kRows = kVectors >= 8 ? 1 : kVectors == 4 ? 2 : 4;
  [[gnu::always_inline]] static V load(const T* p) { return cpu::load<VB>(p); }
};

// A row's sum: its 16 sums, the row's last n % 16 products added to the first of them
// (element j in sum j % 16, as in the body), then added pairwise (sum l + sum l + 8,
// ...). The last products are added as vectors, the lanes past them with -0 (which
// leaves every sum as it is, -0 and NaN included), and the pairs as vectors while they
// are whole vectors apart: a row's total through memory, one sum at a time, took a
// third of the time of a 256 x 784 product.
template <typename T, int N, typename V>
[[gnu::always_inline]] inline T row_total(V (&acc)[N], const T* r, const T* x, int64_t tail) {
  constexpr int L = 16 / N;
  using S = Sums16<T, int(sizeof(V))>;
  if (tail > 0) {
    T rt[16] = {}, xt[16];
    std::fill_n(xt, 16, T(-0.0));
    std::memcpy(rt, r, size_t(tail) * sizeof(T));
    std::memcpy(xt, x, size_t(tail) * sizeof(T));
    for (int v = 0; v < N; ++v) acc[v] += S::load(rt + v * L) * S::load(xt + v * L);
  }
  for (int w = N / 2; w >= 1; w /= 2)
    for (int v = 0; v < w; ++v) acc[v] += acc[v + w];
  T sums[L];
  std::memcpy(sums, &acc[0], sizeof sums);
  for (int w = L / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) sums[l] += sums[l + w];
  return sums[0];
}

// y[i] = row i of a . x, for m rows of n, kRows at a time: the rows share x's loads,
// and their sums are independent chains of additions.
template <typename T, int VB>
[[gnu::always_inline]] inline void rows_dot_body(const T* a, int64_t lda, const T* x, T* y, int64_t m,
                                                 int64_t n) {
  using S = Sums16<T, VB>;
  using V = typename S::V;
  constexpr int R = S::kRows, N = S::kVectors, L = S::kLanes;
  const int64_t body = n - n % 16;
  int64_t i = 0;
  for (; i < m; i += R) {
    const int rows = int(std::min<int64_t>(R, m - i));
    V acc[R][N] = {};
    if (rows == R) {
      for (int64_t j = 0; j < body; j += 16)
        for (int v = 0; v < N; ++v) {
          const V xv = S::load(x + j + v * L);
          for (int k = 0; k < R; ++k) acc[k][v] += S::load(a + (i + k) * lda + j + v * L) * xv;
        }
    } else {
      for (int k = 0; k < rows; ++k)
        for (int64_t j = 0; j < body; j += 16)
          for (int v = 0; v < N; ++v) acc[k][v] += S::load(a + (i + k) * lda + j + v * L) * S::load(x + j + v * L);
    }
    for (int k = 0; k < rows; ++k) y[i + k] = row_total(acc[k], a + (i + k) * lda + body, x + body, n - body);
  }
}
// Four rows at a time, added into y in row order: y[j] = (((y[j] + x0 r0[j]) + x1 r1[j]) ...
template <typename T>
[[gnu::always_inline]] inline void rows_axpy_body(const T* a, int64_t lda, const T* x, T* y, int64_t k,
                                                  int64_t n) {
  std::fill(y, y + n, T(0));
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    const T x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
    const T *r0 = a + i * lda, *r1 = r0 + lda, *r2 = r1 + lda, *r3 = r2 + lda;
    for (int64_t j = 0; j < n; ++j) y[j] = (((y[j] + x0 * r0[j]) + x1 * r1[j]) + x2 * r2[j]) + x3 * r3[j];
  }
  for (; i < k; ++i) {
    const T xi = x[i];
    const T* r = a + i * lda;
    for (int64_t j = 0; j < n; ++j) y[j] += xi * r[j];
  }
}
#ifdef DL_WIDTH_BUILDS
template <typename T>
DL_TARGET_AVX512 void rows_dot_avx512(const T* a, int64_t lda, const T* x, T* y, int64_t m, int64_t n) {
  rows_dot_body<T, 64>(a, lda, x, y, m, n);
}
template <typename T>
DL_TARGET_AVX2 void rows_dot_avx2(const T* a, int64_t lda, const T* x, T* y, int64_t m, int64_t n) {
  rows_dot_body<T, 32>(a, lda, x, y, m, n);
}
#endif
template <typename T>
void rows_dot(const T* a, int64_t lda, const T* x, T* y, int64_t m, int64_t n) {
#ifdef DL_WIDTH_BUILDS
  switch (vector_bytes()) {
    case 64: return rows_dot_avx512(a, lda, x, y, m, n);
    case 32: return rows_dot_avx2(a, lda, x, y, m, n);
  }
#endif
  rows_dot_body<T, 16>(a, lda, x, y, m, n);
}
DL_TARGET_CLONES void rows_axpy(const float* a, int64_t lda, const float* x, float* y, int64_t k, int64_t n) {
  rows_axpy_body(a, lda, x, y, k, n);
}
DL_TARGET_CLONES void rows_axpy(const double* a, int64_t lda, const double* x, double* y, int64_t k,
                                int64_t n) {
  rows_axpy_body(a, lda, x, y, k, n);
}

// The vector v (n elements `inc` apart) as contiguous memory: v itself, or a copy in buf.
template <typename T>
const T* contiguous(const T* v, int inc, int64_t n, std::vector<T>& buf) {
  if (inc == 1) return v;
  buf.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = v[i * inc];
  return buf.data();
}

// c = op(mat) v, where mat is `rows` x `cols` row-major with leading dimension ld, and
// op transposes it when `trans`; v has `inc` between elements. False when the product is
// OpenBLAS's to run (Note [Small products without OpenBLAS]).
template <typename T>
bool own_gemv(bool trans, int64_t rows, int64_t cols, const T* mat, int64_t ld, const T* v, int inc, T* c) {
  if (rows * cols > kOwnVectorElems) return false;
  std::vector<T> buf;
  const double work = double(rows) * double(cols);
  if (trans) {
    // Each thread adds every row into its own columns of c.
    const T* x = contiguous(v, inc, rows, buf);
    parallel_units(cols, work, [&](int64_t b, int64_t e, int) { rows_axpy(mat + b, ld, x, c + b, rows, e - b); });
  } else {
    // Each thread takes its own rows.
    const T* x = contiguous(v, inc, cols, buf);
    parallel_units(rows, work, [&](int64_t b, int64_t e, int) { rows_dot(mat + b * ld, ld, x, c + b, e - b, cols); });
  }
  return true;
}


// c = op(a) op(b) as product() below takes them, in the engine's own loop (Note [Small
// products of matrices] in small_gemm.cpp); false when the product is OpenBLAS's to run.
// One from kOmpSplitFlops up (the larger ones AVX-512 machines run there) is cut
// between the OpenMP threads along the larger of c's dims, as OpenBLAS's products are
// (Note [Products split between OpenMP threads]), in whole tiles (kSmallGemmRowCut,
// kSmallGemmColumnCut). The loop gives every element the same bits however the product
// is cut, so here the cut may follow the threads there are.
template <typename T>
bool own_gemm(T* c, const T* a, const MatLayout& la, const T* b, const MatLayout& lb, int m, int n, int k) {
  const int64_t ars = la.row_step(), aks = la.col_step(), bks = lb.row_step(), bjs = lb.col_step();
  if (!small_gemm_takes<T>(m, n, k, bks, bjs)) return false;
  const int parts = product_parts(m, n, k);
  if (parts < 2 || !may_share_out()) {
    small_gemm(a, ars, aks, b, bks, bjs, c, n, m, n, k);
    return true;
  }
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? kSmallGemmRowCut : kSmallGemmColumnCut, len = by_rows ? m : n;
  g_split_throttle.timed(2.0 * m * n * k, [&] {
    parallel_parts((len + unit - 1) / unit, parts, [&](int64_t b0, int64_t e0) {
      const int64_t lo = b0 * unit, hi = std::min(len, e0 * unit);
      if (by_rows) small_gemm(a + lo * ars, ars, aks, b, bks, bjs, c + lo * n, n, hi - lo, n, k);
      else small_gemm(a, ars, aks, b + lo * bjs, bks, bjs, c + lo, n, m, hi - lo, k);
    });
  });
  return true;
}


// c (m x n, row-major, ld n) = a (m x k) b (k x n). A vector operand goes to gemv or
// dot, which are much faster than a gemm with one row or column.
template <typename T>
void product(T* c, const T* a, const MatLayout& la, const T* b, const MatLayout& lb, int m, int n,
             int k) {
  const int a_inc = int(la.col_step());  // between a(0, j) and a(0, j + 1)
  const int b_inc = int(lb.row_step());  // between b(i, 0) and b(i + 1, 0)
  if (m == 1 && n == 1 && k <= kOwnVectorElems) {
    std::vector<T> ba, bb;
    rows_dot(contiguous(a, a_inc, k, ba), k, contiguous(b, b_inc, k, bb), c, 1, k);
    return;
  }
  if (n == 1 && own_gemv(la.trans, la.trans ? k : m, la.trans ? m : k, a, la.ld, b, b_inc, c)) return;
  if (m == 1 && own_gemv(!lb.trans, lb.trans ? n : k, lb.trans ? k : n, b, lb.ld, a, a_inc, c)) return;
  if (own_gemm(c, a, la, b, lb, m, n, k)) return;
  const int parts = product_parts(m, n, k);
  blas_threads_for(parts > 1 ? 0.0 : 2.0 * m * n * k);   // the parts run on one BLAS thread each
  if (m == 1 && n == 1) {
    *c = Blas<T>::dot(k, a, a_inc, b, b_inc);
  } else if (n == 1) {
    // out is fresh memory: some BLAS builds scale y by beta = 0 instead of
    // overwriting it, which would keep a NaN left there by an earlier tensor.
    std::fill(c, c + m, T(0));
    if (la.trans) Blas<T>::gemv(CblasTrans, k, m, a, int(la.ld), b, b_inc, c);
    else Blas<T>::gemv(CblasNoTrans, m, k, a, int(la.ld), b, b_inc, c);
  } else if (m == 1) {
    std::fill(c, c + n, T(0));
    if (lb.trans) Blas<T>::gemv(CblasNoTrans, n, k, b, int(lb.ld), a, a_inc, c);
    else Blas<T>::gemv(CblasTrans, k, n, b, int(lb.ld), a, a_inc, c);
  } else if (parts > 1) {
    // Halves (thirds...) of the larger of c's dims, each a product of its own.
    const bool by_rows = m >= n;
    auto part = [&](int64_t b0, int64_t e0) {
      const int lo = int(b0), len = int(e0 - b0);
      if (by_rows) {
        const T* ap = a + int64_t(lo) * la.row_step();  // a's rows lo...
        Blas<T>::gemm(op(la), op(lb), len, n, k, ap, int(la.ld), b, int(lb.ld), c + int64_t(lo) * n, n);
      } else {
        const T* bp = b + int64_t(lo) * lb.col_step();  // b's columns lo...
        Blas<T>::gemm(op(la), op(lb), m, len, k, a, int(la.ld), bp, int(lb.ld), c + lo, n);
      }
    };
    const int64_t len = by_rows ? m : n;
    if (may_share_out()) g_split_throttle.timed(2.0 * m * n * k, [&] { parallel_parts(len, parts, part); });
    else serial_parts(len, parts, part);
  } else {
    Blas<T>::gemm(op(la), op(lb), m, n, k, a, int(la.ld), b, int(lb.ld), c, n);
  }
}

void check_blas_size(int64_t v, const Tensor& a, const Tensor& b) {
  DL_CHECK(v <= INT_MAX, "matmul: shapes ", a.shape(), " and ", b.shape(),
           " are too large for BLAS (a size or stride exceeds ", INT_MAX, ")");
}

template <typename T>
void float_matmul(const Tensor& out, Tensor a, Tensor b) {
  const int nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(a.dim() - 1);
  for (int64_t v : {M, N, K}) check_blas_size(v, a, b);  // before any copy is made
  MatLayout la = layout_of(a), lb = layout_of(b);
  if (!la.ok) la = layout_of(a = compact(a));
  if (!lb.ok) lb = layout_of(b = compact(b));
  for (int64_t v : {la.ld, lb.ld}) check_blas_size(v, a, b);
  const Batches g = batches_of(out, a, b);
  T* c = out.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();

  // Fold the batch into M when b is the same matrix for every batch and a's batches
  // follow one another at M rows of ld each (out is contiguous, so its do too).
  bool fold = g.count > 1 && !la.trans && M * g.count <= INT_MAX;
  int64_t expect = M * la.ld;
  for (int d = g.n - 1; d >= 0 && fold; --d) {
    if (g.sizes[d] == 1) continue;
    fold = g.sb[d] == 0 && g.sa[d] == expect;
    expect *= g.sizes[d];
  }
  if (fold) {
    product<T>(c, pa, la, pb, lb, int(M * g.count), int(N), int(K));
    return;
  }
  if (batches_between_threads(g.count, M, N, K)) {
    std::vector<int64_t> oa, ob;
    batch_offsets(g, oa, ob);
    // Each product on one BLAS thread (OpenBLAS not loaded for products of the own loop).
    if (!small_gemm_takes<T>(M, N, K, lb.row_step(), lb.col_step())) blas_threads_for(0.0);
    const double work = product_work(M, N, K) * double(g.count);
    g_split_throttle.timed(work, [&] {
      parallel_units(g.count, work, [&](int64_t b0, int64_t e0, int) {
        for (int64_t k = b0; k < e0; ++k)
          product<T>(c + k * M * N, pa + oa[size_t(k)], la, pb + ob[size_t(k)], lb, int(M), int(N), int(K));
      });
    });
    return;
  }
  for_each_batch(g, [&](int64_t k, int64_t oa, int64_t ob) {
    product<T>(c + k * M * N, pa + oa, la, pb + ob, lb, int(M), int(N), int(K));
  });
}

// Integer matmul: rows of out accumulated in uint64 (wrapping like int64 arithmetic
// without the undefined behaviour of signed overflow), then narrowed to T.
template <typename T>
void int_matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int nd = out.dim(), ad = a.dim(), bd = b.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(ad - 1);
  const int64_t ar = a.stride(ad - 2), ac = a.stride(ad - 1);
  const int64_t br = b.stride(bd - 2), bc = b.stride(bd - 1);
  const Batches g = batches_of(out, a, b);
  std::vector<int64_t> oa, ob;   // so that rows can be split between threads
  batch_offsets(g, oa, ob);
  T* c = out.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  const int64_t rows = g.count * M;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> acc(static_cast<size_t>(N));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t k = r / M, i = r % M;
      const T* arow = pa + oa[size_t(k)] + i * ar;
      const T* bm = pb + ob[size_t(k)];
      std::fill(acc.begin(), acc.end(), uint64_t(0));
      for (int64_t p = 0; p < K; ++p) {
        const uint64_t x = uint64_t(int64_t(arow[p * ac]));
        if (x == 0) continue;
        const T* brow = bm + p * br;
        for (int64_t j = 0; j < N; ++j) acc[size_t(j)] += x * uint64_t(int64_t(brow[j * bc]));
      }
      T* crow = c + r * N;
      for (int64_t j = 0; j < N; ++j) crow[j] = static_cast<T>(acc[size_t(j)]);
    }
  };
  // (the work in double: broadcast operands may have sizes whose product passes 2^63)
  parallel_units(rows, double(rows) * double(N) * double(K), [&](int64_t b, int64_t e, int) { run(b, e); });
}

}  // namespace

void matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  // (half products are computed in float32 by the front end: Backend::half_matmul)
  geometry::dispatch_product<false>(out.dtype(), [&]<typename T>() { float_matmul<T>(out, a, b); },
                                    [&]<typename T>() { int_matmul<T>(out, a, b); });
}

}  // namespace dl::cpu

namespace dl {

void set_cpu_threads(int n) {
  if (n < 1) fail(ErrorKind::Value, "set_num_threads: the count must be at least 1, got ", n);
  omp_set_num_threads(n);
  cpu::g_blas_configured.store(n);
  cpu::g_blas_current.store(n);
  cpu::openblas_set_threads(n);
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace dl
