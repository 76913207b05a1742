// CPU kernels of the reductions: the reducers of tensor/reduce_functors.h run over a
// plan of x's dims, plus max/min with indices and softmax (contract: tensor/kernels.def).
//
// The plan sorts x's dims by stride (memory order), drops size-1 dims and merges
// neighbours that can be walked as one, then takes one of two paths:
//  - rows: the innermost dim is reduced. Each output folds contiguous (or strided)
//    runs with kLanes independent accumulators, which the compiler vectorises.
//  - columns: the innermost dim is kept. A tile of up to kTile neighbouring outputs is
//    folded together, one row of x at a time, so the inner loop runs along memory.
// Full reductions, per-row reductions and leading-dim (column) reductions of
// contiguous tensors all reduce to these two loops with no per-element index math.
//
// Note [Reduction order and determinism]
// The order in which an output's elements are folded depends on the shapes and
// strides only, never on the thread count: its runs are grouped (or cut) into blocks
// of about kBlock elements, each folded with kLanes accumulators, and block results
// are merged left to right; a column reduction is cut into a number of row blocks that
// is a function of the shape. Threads only decide who computes which block, so a
// result is bit-identical with 1 or 16 threads (tests/cpp/test_reduce.cpp checks it).
#include <algorithm>
#include <vector>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/lanes.h"
#include "tensor/cpu/loops.h"
#include "tensor/fold.h"
#include "tensor/reduce_dispatch.h"
#include "tensor/reduce_functors.h"

namespace dl::cpu {

namespace {

constexpr int64_t kBlock = 16384;   // elements folded in one block of a long row
constexpr int64_t kTile = 256;      // outputs folded together on the column path
constexpr int64_t kShortRun = 16;   // rows shorter than this take the column path
constexpr int64_t kMinTasks = 32;   // column tasks below which rows are split too
constexpr int64_t kColRows = 512;   // rows per block when a column reduction is split
constexpr int64_t kMaxColBlocks = 64;

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Runs f(i) for i in [0, n) on all threads (static schedule); serially when `par` is false.
template <typename F>
void parallel_for(int64_t n, bool par, F&& f) {
  if (!par || n < 2) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// A multi-index over some dims, with the running offsets along two stride sets.
struct Odometer {
  int n = 0;
  const int64_t* size = nullptr;
  const int64_t* s0 = nullptr;
  const int64_t* s1 = nullptr;
  int64_t idx[kMaxDims] = {};
  int64_t off0 = 0, off1 = 0;

  Odometer(int n_, const int64_t* size_, const int64_t* s0_, const int64_t* s1_)
      : n(n_), size(size_), s0(s0_), s1(s1_) {}
  void seek(int64_t lin) {
    off0 = off1 = 0;
    for (int d = n - 1; d >= 0; --d) {
      idx[d] = lin % size[d];
      lin /= size[d];
      off0 += idx[d] * s0[d];
      off1 += idx[d] * s1[d];
    }
  }
  void next() {
    for (int d = n - 1; d >= 0; --d) {
      ++idx[d];
      off0 += s0[d];
      off1 += s1[d];
      if (idx[d] < size[d]) return;
      off0 -= size[d] * s0[d];
      off1 -= size[d] * s1[d];
      idx[d] = 0;
    }
  }
};

// x's dims split into kept and reduced ones (tensor/geometry.h, as the CUDA plugin's).
using Plan = geometry::ReducePlan;
Plan make_plan(const Tensor& out, const Tensor& x, const bool* red) { return geometry::reduce_plan(out, x, red); }

// ---- the rows path ----------------------------------------------------------------

// The blocks of one output's reduced space (see Note [Reduction order and determinism]):
// a run longer than kBlock is cut into chunks; shorter runs are grouped.
struct RowBlocks {
  int64_t len, stride, nruns, runs_per_block, chunks_per_run, count;
  explicit RowBlocks(const Plan& p) {
    len = p.rs[p.nr - 1];
    stride = p.rxs[p.nr - 1];
    nruns = p.nred / len;
    if (len >= kBlock) {
      runs_per_block = 1;
      chunks_per_run = ceil_div(len, kBlock);
      count = nruns * chunks_per_run;
    } else {
      runs_per_block = std::max<int64_t>(1, kBlock / len);
      chunks_per_run = 1;
      count = ceil_div(nruns, runs_per_block);
    }
  }
};

template <typename R, typename T>
typename R::acc_t fold_block(const R& r, const Plan& p, const RowBlocks& g, const T* base,
                             int64_t b, double c) {
  Odometer outer(p.nr - 1, p.rs, p.rxs, p.rzero);
  if (g.chunks_per_run > 1) {
    int64_t run = b / g.chunks_per_run, start = (b % g.chunks_per_run) * kBlock;
    outer.seek(run);
    return fold_run(r, base + outer.off0 + start * g.stride, std::min(kBlock, g.len - start),
                    g.stride, c);
  }
  int64_t r0 = b * g.runs_per_block, r1 = std::min(g.nruns, r0 + g.runs_per_block);
  if (r1 - r0 == 1) {
    outer.seek(r0);
    return fold_run(r, base + outer.off0, g.len, g.stride, c);
  }
  // Several runs share the lanes, so the pairwise merge is paid once per block.
  Lanes<R> l(r);
  outer.seek(r0);
  for (int64_t run = r0; run < r1; ++run, outer.next()) l.add(r, base + outer.off0, g.len, g.stride, c);
  return l.result(r);
}

// One output's fold; its blocks are computed in parallel when `par`, with the same
// result either way.
template <typename R, typename T>
typename R::acc_t fold_output(const R& r, const Plan& p, const RowBlocks& g, const T* base,
                              double c, bool par) {
  using A = typename R::acc_t;
  if (!par || g.count < 2) {
    A a = fold_block(r, p, g, base, 0, c);
    for (int64_t b = 1; b < g.count; ++b) a = r.merge(a, fold_block(r, p, g, base, b, c));
    return a;
  }
  std::unique_ptr<A[]> part(new A[g.count]);  // not std::vector: vector<bool> packs bits
  parallel_for(g.count, true, [&](int64_t b) { part[b] = fold_block(r, p, g, base, b, c); });
  A a = part[0];
  for (int64_t b = 1; b < g.count; ++b) a = r.merge(a, part[b]);
  return a;
}

template <typename Out, typename R, typename T>
void reduce_rows(const R& r, const Plan& p, const T* x, Out* out, const double* centers) {
  RowBlocks g(p);
  bool big = p.nout * p.nred >= kParallelGrain;
  // Many outputs: one thread per output range. Few: each output's blocks in parallel.
  bool per_output = big && p.nout >= max_threads();
  auto range = [&](int64_t o0, int64_t o1, bool par_blocks) {
    Odometer k(p.nk, p.ks, p.kxs, p.kos);
    k.seek(o0);
    for (int64_t o = o0; o < o1; ++o, k.next()) {
      double c = R::kCentered ? centers[k.off1] : 0.0;
      typename R::acc_t a = fold_output(r, p, g, x + k.off0, c, par_blocks);
      out[k.off1] = fn::convert<Out>(r.finish(a, p.nred, c));
    }
  };
  if (!per_output) {
    range(0, p.nout, big);
    return;
  }
  int64_t nchunks = std::min<int64_t>(p.nout, 4 * int64_t(max_threads()));
  parallel_for(nchunks, true, [&](int64_t t) {
    range(p.nout * t / nchunks, p.nout * (t + 1) / nchunks, false);
  });
}

// ---- the columns path ----------------------------------------------------------------

// Where the centres of a tile's outputs are (read by centred reducers only).
struct TileCenters {
  const double* p;
  int64_t stride;
};
template <typename R>
inline double center_at(TileCenters c, int64_t k) {
  if constexpr (R::kCentered) return c.p[k * c.stride];
  else return 0.0;
}

// Folds reduced positions [q0, q1) into acc[0..jt), outputs j at x stride js.
template <typename R, typename T>
void fold_cols(const R& r, const Plan& p, const T* base, int64_t jt, int64_t js,
               int64_t q0, int64_t q1, TileCenters c, typename R::acc_t* acc) {
  for (int64_t k = 0; k < jt; ++k) acc[k] = r.identity();
  const int64_t len = p.rs[p.nr - 1], ls = p.rxs[p.nr - 1];
  Odometer outer(p.nr - 1, p.rs, p.rxs, p.rzero);
  outer.seek(q0 / len);
  int64_t i = q0 % len, left = q1 - q0;
  while (left > 0) {
    int64_t cnt = std::min(len - i, left);
    const T* row = base + outer.off0 + i * ls;
    if (js == 1) {
      // Four rows per sweep keep acc[k] in a register for four steps; each column is
      // still folded in row order.
      int64_t q = 0;
      for (; q + 4 <= cnt; q += 4, row += 4 * ls)
        for (int64_t k = 0; k < jt; ++k) {
          const double ck = center_at<R>(c, k);
          typename R::acc_t a = r.step(acc[k], row[k], ck);
          a = r.step(a, row[ls + k], ck);
          a = r.step(a, row[2 * ls + k], ck);
          acc[k] = r.step(a, row[3 * ls + k], ck);
        }
      for (; q < cnt; ++q, row += ls)
        for (int64_t k = 0; k < jt; ++k) acc[k] = r.step(acc[k], row[k], center_at<R>(c, k));
    } else {
      for (int64_t q = 0; q < cnt; ++q, row += ls)
        for (int64_t k = 0; k < jt; ++k) acc[k] = r.step(acc[k], row[k * js], center_at<R>(c, k));
    }
    left -= cnt;
    i = 0;
    outer.next();
  }
}

template <typename Out, typename R, typename T>
void reduce_cols(const R& r, const Plan& p, const T* x, Out* out, const double* centers) {
  using A = typename R::acc_t;
  const int64_t J = p.ks[p.nk - 1], js = p.kxs[p.nk - 1], jos = p.kos[p.nk - 1];
  const int64_t M = p.nout / J, ntiles = (J + kTile - 1) / kTile, tasks = M * ntiles;
  // The split of the reduced rows is a function of the shape (Note [Reduction order
  // and determinism]); it only happens when there are too few tiles to share out.
  int64_t nrb = 1;
  if (tasks < kMinTasks && p.nred >= 2 * kColRows)
    nrb = std::min(kMaxColBlocks, p.nred / kColRows);
  bool big = p.nout * p.nred >= kParallelGrain;

  auto task_geometry = [&](int64_t t, Odometer& k, int64_t& j0, int64_t& jt) {
    k.seek(t / ntiles);
    j0 = (t % ntiles) * kTile;
    jt = std::min(kTile, J - j0);
  };
  auto tile_centers = [&](const Odometer& k, int64_t j0) {
    return TileCenters{R::kCentered ? centers + k.off1 + j0 * jos : nullptr, jos};
  };
  auto store = [&](const Odometer& k, int64_t j0, int64_t jt, const A* acc, TileCenters c) {
    for (int64_t q = 0; q < jt; ++q)
      out[k.off1 + (j0 + q) * jos] = fn::convert<Out>(r.finish(acc[q], p.nred, center_at<R>(c, q)));
  };

  if (nrb == 1) {
    parallel_for(tasks, big, [&](int64_t t) {
      Odometer k(p.nk - 1, p.ks, p.kxs, p.kos);
      int64_t j0, jt;
      task_geometry(t, k, j0, jt);
      A acc[kTile];
      TileCenters c = tile_centers(k, j0);
      fold_cols(r, p, x + k.off0 + j0 * js, jt, js, 0, p.nred, c, acc);
      store(k, j0, jt, acc, c);
    });
    return;
  }
  std::unique_ptr<A[]> part(new A[nrb * kTile]);
  for (int64_t t = 0; t < tasks; ++t) {
    Odometer k(p.nk - 1, p.ks, p.kxs, p.kos);
    int64_t j0, jt;
    task_geometry(t, k, j0, jt);
    TileCenters c = tile_centers(k, j0);
    parallel_for(nrb, big, [&](int64_t b) {
      // block b's share of the reduced rows, floor(nred b / nrb), in 128 bits: an
      // expanded x may reduce over nearly 2^63 rows
      const auto at = [&](int64_t i) { return int64_t(__int128(p.nred) * i / nrb); };
      fold_cols(r, p, x + k.off0 + j0 * js, jt, js, at(b), at(b + 1), c, part.get() + b * kTile);
    });
    for (int64_t b = 1; b < nrb; ++b)
      for (int64_t q = 0; q < jt; ++q) part[q] = r.merge(part[q], part[b * kTile + q]);
    store(k, j0, jt, part.get(), c);
  }
}

// ---- driver ---------------------------------------------------------------------------

// out[...] = finish(fold of x over the reduced dims). `centers` (for centred reducers)
// is laid out like `out`.
template <typename Out, typename R>
void run_reduce(const R& r, const Tensor& out, const Tensor& x, const std::vector<int>& dims,
                const double* centers) {
  using T = typename R::in_t;
  DL_ASSERT(out.is_contiguous() && out.dtype() == dtype_of<Out>::value);
  if (out.numel() == 0) return;
  Out* o = out.data<Out>();
  if (x.numel() == 0) {  // an empty reduction: each output is the identity, finished
    for (int64_t i = 0; i < out.numel(); ++i)
      o[i] = fn::convert<Out>(r.finish(r.identity(), 0, R::kCentered ? centers[i] : 0.0));
    return;
  }
  bool red[kMaxDims] = {};
  for (int d : dims) red[d] = true;
  Plan p = make_plan(out, x, red);
  const T* xp = x.data<T>();
  if (p.nk == 0 || (p.red_innermost && p.rs[p.nr - 1] >= kShortRun))
    reduce_rows<Out>(r, p, xp, o, centers);
  else
    reduce_cols<Out>(r, p, xp, o, centers);
}

// Two passes: the centres (first reducer's results, in double), then the centred fold.
template <typename Out, typename First, typename R>
void run_centered(const First& first, const R& r, const Tensor& out, const Tensor& x,
                  const std::vector<int>& dims, const char* op) {
  Tensor c = empty(out.shape(), DType::Float64, Device{}, op);
  run_reduce<double>(first, c, x, dims, nullptr);
  double* cp = c.data<double>();
  for (int64_t i = 0; i < c.numel(); ++i) cp[i] = R::center(cp[i]);
  run_reduce<Out>(r, out, x, dims, cp);
}

template <typename T>
void reduce_norm(const Tensor& out, const Tensor& x, const std::vector<int>& dims, double p) {
  if (p == 2) run_reduce<T>(fn::Norm2Red<T>{}, out, x, dims, nullptr);
  else if (p == 1) run_reduce<T>(fn::Norm1Red<T>{}, out, x, dims, nullptr);
  else if (p == 0) run_reduce<T>(fn::Norm0Red<T>{}, out, x, dims, nullptr);
  else if (p == INFINITY) run_reduce<T>(fn::NormInfRed<T>{}, out, x, dims, nullptr);
  else if (p == -INFINITY) run_reduce<T>(fn::NormNegInfRed<T>{}, out, x, dims, nullptr);
  else run_reduce<T>(fn::NormPRed<T>{p}, out, x, dims, nullptr);
}

// ---- max/min with indices ------------------------------------------------------------

template <typename T, bool IsMax>
void arg_reduce_typed(const Tensor& values, const Tensor& indices, const Tensor& x, int dim) {
  fn::ArgBetter<T, IsMax> better;
  T* vo = values.defined() ? values.data<T>() : nullptr;
  int64_t* io = indices.data<int64_t>();
  const T* xp = x.data<T>();
  const int64_t n = x.size(dim);
  bool red[kMaxDims] = {};
  red[dim] = true;
  Plan p = make_plan(indices, x, red);
  const int64_t s = n == 1 ? 0 : p.rxs[0];  // the plan drops a size-1 dim
  bool big = p.nout * n >= kParallelGrain;

  // Best of elements [i0, i1) of the row at `row`. A long contiguous range is done in
  // two passes, both cheap: the vectorised amax/amin fold, then a search for the first
  // element equal to it (or the first NaN), instead of one data-dependent scan.
  auto scan = [&](const T* row, int64_t i0, int64_t i1, T& best, int64_t& bi) {
    if (s == 1 && i1 - i0 >= 2 * kLanes) {
      T m = IsMax ? fold_run(fn::AmaxRed<T>{}, row + i0, i1 - i0, 1, 0.0)
                  : fold_run(fn::AminRed<T>{}, row + i0, i1 - i0, 1, 0.0);
      int64_t i = i0;
      if (m != m) {
        while (row[i] == row[i]) ++i;
      } else {
        while (!(row[i] == m)) ++i;
      }
      best = row[i];
      bi = i;
      return;
    }
    best = row[i0 * s];
    bi = i0;
    for (int64_t i = i0 + 1; i < i1; ++i) {
      T v = row[i * s];
      if (better(v, best)) { best = v; bi = i; }
    }
  };
  if (p.nk == 0 || (p.red_innermost && n >= kShortRun)) {
    auto one = [&](const Odometer& k, bool par) {
      const T* row = xp + k.off0;
      T best;
      int64_t bi;
      int64_t nb = ceil_div(n, kBlock);
      if (!par || nb < 2) {
        scan(row, 0, n, best, bi);
      } else {  // blocks in parallel, merged in order (ties keep the earlier block)
        std::unique_ptr<T[]> bv(new T[nb]);
        std::unique_ptr<int64_t[]> bix(new int64_t[nb]);
        parallel_for(nb, true, [&](int64_t b) {
          scan(row, b * kBlock, std::min(n, (b + 1) * kBlock), bv[b], bix[b]);
        });
        best = bv[0];
        bi = bix[0];
        for (int64_t b = 1; b < nb; ++b)
          if (better(bv[b], best)) { best = bv[b]; bi = bix[b]; }
      }
      if (vo) vo[k.off1] = best;
      io[k.off1] = bi;
    };
    bool per_output = big && p.nout >= max_threads();
    if (!per_output) {
      Odometer k(p.nk, p.ks, p.kxs, p.kos);
      for (int64_t o = 0; o < p.nout; ++o, k.next()) one(k, big);
      return;
    }
    parallel_for(p.nout, true, [&](int64_t o) {
      Odometer k(p.nk, p.ks, p.kxs, p.kos);
      k.seek(o);
      one(k, false);
    });
    return;
  }
  // Columns: a tile of neighbouring outputs scanned together along the reduced dim.
  const int64_t J = p.ks[p.nk - 1], js = p.kxs[p.nk - 1], jos = p.kos[p.nk - 1];
  const int64_t ntiles = (J + kTile - 1) / kTile, tasks = p.nout / J * ntiles;
  parallel_for(tasks, big, [&](int64_t t) {
    Odometer k(p.nk - 1, p.ks, p.kxs, p.kos);
    k.seek(t / ntiles);
    int64_t j0 = (t % ntiles) * kTile, jt = std::min(kTile, J - j0);
    const T* base = xp + k.off0 + j0 * js;
    T best[kTile];
    int64_t bi[kTile];
    for (int64_t q = 0; q < jt; ++q) { best[q] = base[q * js]; bi[q] = 0; }
    for (int64_t i = 1; i < n; ++i) {
      const T* row = base + i * s;
      for (int64_t q = 0; q < jt; ++q) {
        T v = row[q * js];
        bool b = better(v, best[q]);
        best[q] = b ? v : best[q];
        bi[q] = b ? i : bi[q];
      }
    }
    for (int64_t q = 0; q < jt; ++q) {
      if (vo) vo[k.off1 + (j0 + q) * jos] = best[q];
      io[k.off1 + (j0 + q) * jos] = bi[q];
    }
  });
}

// ---- softmax ----------------------------------------------------------------------------

// o[i] = e^(x[i] - shift): float32 through fn::ExpFn's polynomial in double (Note [Float
// exponentials in double] in functors.h), which this loop vectorises, built for AVX2 and
// AVX-512 too; libm's expf is a call per element (a tenth of the attention row's time).
// float64 keeps libm, as ExpFn does.
DL_TARGET_CLONES void exp_shifted(const float* x, float shift, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = fn::ExpFn{}(x[i] - shift);
}
void exp_shifted(const double* x, double shift, double* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = fn::ExpFn{}(x[i] - shift);
}

template <typename T>
void softmax_typed(bool log, const Tensor& out, const Tensor& x, int dim) {
  // An empty x's other sizes may multiply past 2^63, e.g. (2^62, 2^62, 0).
  if (x.numel() == 0) return;
  int64_t M = 1, N = x.size(dim), J = 1;
  for (int d = 0; d < dim; ++d) M *= x.size(d);
  for (int d = dim + 1; d < x.dim(); ++d) J *= x.size(d);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  bool big = M * N * J >= kParallelGrain;
  if (J == 1) {
    parallel_for(M, big, [&](int64_t m) {
      const T* row = xp + m * N;
      T* o = op + m * N;
      // Separate passes, so that all but the exp one vectorise.
      T mx = fold_run(fn::AmaxRed<T>{}, row, N, 1, 0.0);
      if (log) {
        double s = fold_run(fn::LogsumexpRed<T>{}, row, N, 1, double(mx));
        T ls = T(std::log(s));
        fn::LogSoftmaxOutFn f;
        for (int64_t i = 0; i < N; ++i) o[i] = f(row[i], mx, ls);
      } else {  // keep exp(x - m) in the output, then scale: one exp per element
        exp_shifted(row, mx, o, N);
        T inv = T(1.0 / fold_run(fn::SumRed<T>{}, o, N, 1, 0.0));
        for (int64_t i = 0; i < N; ++i) o[i] *= inv;
      }
    });
    return;
  }
  const int64_t ntiles = (J + kTile - 1) / kTile;
  parallel_for(M * ntiles, big, [&](int64_t t) {
    int64_t m = t / ntiles, j0 = (t % ntiles) * kTile, jt = std::min(kTile, J - j0);
    const T* base = xp + m * N * J + j0;
    T* obase = op + m * N * J + j0;
    T mx[kTile];
    double s[kTile];
    for (int64_t q = 0; q < jt; ++q) { mx[q] = base[q]; s[q] = 0; }
    for (int64_t i = 1; i < N; ++i)
      for (int64_t q = 0; q < jt; ++q) mx[q] = fn::nan_max(mx[q], base[i * J + q]);
    // exp(x - m) goes to the output and is scaled there afterwards (softmax), so each
    // element is exponentiated once.
    for (int64_t i = 0; i < N; ++i)
      for (int64_t q = 0; q < jt; ++q) {
        T e = fn::ExpFn{}(T(base[i * J + q] - mx[q]));   // as exp_shifted: the same values
        if (!log) obase[i * J + q] = e;
        s[q] += double(e);
      }
    T f[kTile];
    if (log) {
      for (int64_t q = 0; q < jt; ++q) f[q] = T(std::log(s[q]));
      fn::LogSoftmaxOutFn g;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t q = 0; q < jt; ++q) obase[i * J + q] = g(base[i * J + q], mx[q], f[q]);
    } else {
      for (int64_t q = 0; q < jt; ++q) f[q] = T(1.0 / s[q]);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t q = 0; q < jt; ++q) obase[i * J + q] *= f[q];
    }
  });
}

}  // namespace

namespace {
// The CPU's loops for dispatch_reduction (tensor/reduce_dispatch.h).
struct Runner {
  const Tensor& out;
  const Tensor& x;
  const std::vector<int>& dims;
  const char* name;
  template <typename Out, typename R> void plain(R r) { run_reduce<Out>(r, out, x, dims, nullptr); }
  template <typename T, typename R1, typename R2> void centered(R1 first, R2 second) {
    run_centered<T>(first, second, out, x, dims, name);
  }
  template <typename T> void norm(double p) { reduce_norm<T>(out, x, dims, p); }
};
}  // namespace

void reduce(Op op, const Tensor& out, const Tensor& x, const std::vector<int>& dims, const ReduceOpts& opts) {
  Runner run{out, x, dims, op_name(op)};
  dispatch_reduction(op, x.dtype(), opts, run);
}

void arg_reduce(Op op, const Tensor& values, const Tensor& indices, const Tensor& x, int dim) {
  DL_ASSERT(indices.is_contiguous() && indices.dtype() == DType::Int64);
  DL_ASSERT(!values.defined() || (values.is_contiguous() && values.dtype() == x.dtype()));
  if (indices.numel() == 0) return;
  bool is_max = op == Op::MaxDim || op == Op::Argmax;
  DL_ASSERT(is_max || op == Op::MinDim || op == Op::Argmin);
  DL_DISPATCH_ALL(x.dtype(), op_name(op), {
    if (is_max) arg_reduce_typed<scalar_t, true>(values, indices, x, dim);
    else arg_reduce_typed<scalar_t, false>(values, indices, x, dim);
  });
}

void softmax(Op op, const Tensor& out, const Tensor& x, int dim) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && out.dtype() == x.dtype());
  DL_ASSERT(op == Op::Softmax || op == Op::LogSoftmax);
  DL_DISPATCH_FLOAT(x.dtype(), op_name(op), softmax_typed<scalar_t>(op == Op::LogSoftmax, out, x, dim));
}

// Note [Softmax's gradient in one pass]
// x's gradient from y = softmax(x) and the output's gradient g is y (g - sum(g y)) per
// row: recorded, that is four passes over the (rows, N) scores (a product, a sum, a
// difference, a product) and three temporaries of their size; attention makes such
// scores. Here a row at a time: the sum of the products g y (each rounded to the dtype,
// as the recorded product was) in kLanes double accumulators, then one pass for gx.
// Autograd's derivative uses it when nothing is recorded or observed and the dim is the
// last (autograd/reduce.cpp).

namespace {

template <typename T>
[[gnu::always_inline]] inline void softmax_backward_rows(T* gx, const T* g, const T* y, int64_t N, int64_t b,
                                                         int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const T* gr = g + r * N;
    const T* yr = y + r * N;
    T* o = gx + r * N;
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= N; i += kLanes)
      for (int k = 0; k < kLanes; ++k) lane[k] += double(T(gr[i + k] * yr[i + k]));
    for (int64_t k = 0; k < N - i; ++k) lane[k] += double(T(gr[i + k] * yr[i + k]));
    for (int width = kLanes / 2; width > 0; width /= 2)
      for (int k = 0; k < width; ++k) lane[k] += lane[k + width];
    const T s = T(lane[0]);
    for (int64_t j = 0; j < N; ++j) o[j] = yr[j] * (gr[j] - s);
  }
}
DL_TARGET_CLONES void softmax_backward_float(float* gx, const float* g, const float* y, int64_t N, int64_t b,
                                             int64_t e) {
  softmax_backward_rows(gx, g, y, N, b, e);
}

template <typename T>
void softmax_backward_typed(const Tensor& gx, const Tensor& g, const Tensor& y) {
  const int64_t N = y.size(y.dim() - 1), R = y.numel() / N;   // y is not empty
  T* o = gx.data<T>();
  const T *gp = g.data<T>(), *yp = y.data<T>();
  parallel_units(R, 4.0 * double(y.numel()), [&](int64_t b, int64_t e, int) {
    if constexpr (std::is_same_v<T, float>) softmax_backward_float(o, gp, yp, N, b, e);
    else softmax_backward_rows(o, gp, yp, N, b, e);
  });
}

}  // namespace

void softmax_backward(const Tensor& gx, const Tensor& g, const Tensor& y) {
  DL_ASSERT(gx.is_contiguous() && g.is_contiguous() && y.is_contiguous() && g.dtype() == y.dtype());
  if (y.numel() == 0) return;
  DL_DISPATCH_FLOAT(y.dtype(), "softmax", softmax_backward_typed<scalar_t>(gx, g, y));
}

// ---- scans ------------------------------------------------------------------------------
// x contiguous, seen as (M, N, J) around dim (N its size): a running fold along N for each
// (m, j), in the accumulator type A (double for floats, int64 for integers), from n = N-1
// down with `reverse`. With J > 1 a row of J accumulators advances a row of x at a time,
// so every pass reads memory in order.

template <typename T, typename A, typename O>
void scan_typed(const Tensor& out, const Tensor& x, int dim, bool reverse, fn::ScanStep step) {
  int64_t M = 1, N = x.size(dim), J = 1;
  for (int d = 0; d < dim; ++d) M *= x.size(d);
  for (int d = dim + 1; d < x.dim(); ++d) J *= x.size(d);
  const T* xp = x.data<T>();
  O* op = out.data<O>();
  parallel_for(M, M * N * J >= kParallelGrain, [&](int64_t m) {
    std::vector<A> acc(size_t(J), step.template init<A>());
    for (int64_t s = 0; s < N; ++s) {
      const int64_t n = reverse ? N - 1 - s : s;
      const T* in = xp + (m * N + n) * J;
      O* o = op + (m * N + n) * J;
      for (int64_t j = 0; j < J; ++j) {
        acc[size_t(j)] = step(acc[size_t(j)], A(in[j]));
        o[j] = O(acc[size_t(j)]);
      }
    }
  });
}

void scan(Op op, const Tensor& out, const Tensor& x, int dim, bool reverse) {
  DL_ASSERT((op == Op::Cumsum || op == Op::Cumprod) && x.is_contiguous() && out.is_contiguous());
  const fn::ScanStep step{op == Op::Cumprod};
  if (is_floating(x.dtype())) {
    DL_DISPATCH_FLOAT(x.dtype(), op_name(op), (scan_typed<scalar_t, double, scalar_t>(out, x, dim, reverse, step)));
  } else {
    DL_DISPATCH_ALL(x.dtype(), op_name(op), (scan_typed<scalar_t, int64_t, int64_t>(out, x, dim, reverse, step)));
  }
}

// ---- folds fed a piece at a time (tensor/fold.h) ------------------------------------------
// A full reduction of a contiguous buffer of n elements is, in the plan above, one run of
// n: RowBlocks cuts it into chunks of kBlock, fold_block folds each with fold_run (lanes,
// or in order when shorter than kLanes), fold_output merges them left to right. These
// entries take the same steps with the chunk arriving in pieces: Lanes::add fed pieces
// whose lengths are multiples of kLanes leaves each lane what one call would.

static_assert(fold::kChunk == kBlock && fold::kPiece == kLanes);

namespace {

template <typename R>
Lanes<R>* lanes_of(fold::State& st) {
  static_assert(sizeof(Lanes<R>) <= sizeof(st.lanes) && alignof(Lanes<R>) <= 8);
  return std::launder(reinterpret_cast<Lanes<R>*>(st.lanes));
}

// f(R{}) for the reducer of op over dt.
template <typename F>
void with_reducer(Op op, DType dt, F&& f) {
  const bool single = dt == DType::Float32;
  DL_ASSERT(fold::served(op, dt));
  switch (op) {
    case Op::Sum: return single ? f(fn::SumRed<float>{}) : f(fn::SumRed<double>{});
    case Op::Mean: return single ? f(fn::MeanRed<float>{}) : f(fn::MeanRed<double>{});
    case Op::Amax: return single ? f(fn::AmaxRed<float>{}) : f(fn::AmaxRed<double>{});
    default: return single ? f(fn::AminRed<float>{}) : f(fn::AminRed<double>{});
  }
}

}  // namespace

}  // namespace dl::cpu

namespace dl::fold {

using cpu::Lanes;

bool served(Op op, DType dt) {
  return (dt == DType::Float32 || dt == DType::Float64) &&
         (op == Op::Sum || op == Op::Mean || op == Op::Amax || op == Op::Amin);
}

void start(Op op, DType dt, State& st) {
  cpu::with_reducer(op, dt, [&](auto r) { new (st.lanes) Lanes<decltype(r)>(r); });
}

void add(Op op, DType dt, State& st, const void* p, int64_t n, int64_t len) {
  cpu::with_reducer(op, dt, [&](auto r) {
    using R = decltype(r);
    using T = typename R::in_t;
    Lanes<R>* l = cpu::lanes_of<R>(st);
    const T* x = static_cast<const T*>(p);
    if (len < kPiece) {
      for (int64_t i = 0; i < n; ++i) l->lane[0] = r.step(l->lane[0], x[i], 0.0);
    } else {
      l->add(r, x, n, 1, 0.0);
    }
  });
}

Part close(Op op, DType dt, State& st, int64_t len) {
  Part out;
  cpu::with_reducer(op, dt, [&](auto r) {
    using R = decltype(r);
    Lanes<R>* l = cpu::lanes_of<R>(st);
    const typename R::acc_t a = len < kPiece ? l->lane[0] : l->result(r);
    static_assert(sizeof a <= sizeof out.bytes);
    std::memcpy(out.bytes, &a, sizeof a);
  });
  return out;
}

void finish(Op op, DType dt, const Part* parts, int64_t nparts, int64_t numel, void* out) {
  cpu::with_reducer(op, dt, [&](auto r) {
    using R = decltype(r);
    using A = typename R::acc_t;
    using T = typename R::in_t;
    A a, b;
    std::memcpy(&a, parts[0].bytes, sizeof a);
    for (int64_t k = 1; k < nparts; ++k) {
      std::memcpy(&b, parts[k].bytes, sizeof b);
      a = r.merge(a, b);
    }
    *static_cast<T*>(out) = fn::convert<T>(r.finish(a, numel, 0.0));
  });
}

}  // namespace dl::fold
