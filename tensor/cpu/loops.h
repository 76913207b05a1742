// Elementwise loops over strided, broadcast operands (the CPU side of the functors).
//
// Operand 0 is the output; every operand is described by a data pointer and strides
// over the output's shape (0 where it broadcasts). Dims are coalesced first, so a
// contiguous same-shape op runs as one flat loop with no per-element index
// arithmetic, which the compiler vectorises. Above kParallelGrain elements the loop is
// split across OpenMP threads; below it no thread is touched. The grain is large (1 MB
// of float32) because a parallel region costs far more than the loop it splits when the
// cores are shared: with other processes running, a 200,000-element update took many
// times longer on two OpenMP threads than on one (docs/performance.md, "Measurements
// behind the code").
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/geometry.h"
#include "tensor/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

// A hot loop compiled for AVX-512 and AVX2 as well as for the baseline, the version
// picked when the library loads (GCC's and clang's function multiversioning). Only for
// loops whose results do not depend on the instruction set: the engine is compiled with
// -ffp-contract=off (tensor/CMakeLists.txt), so AVX-512's fused multiply-add is never
// put in place of a multiply and an add, and each version rounds exactly as the
// baseline does. (What the wider versions gain: bench/, `sum1e7`; docs/performance.md,
// "Measurements behind the code".)
// GCC's only: clang 14 built some such functions for their first target alone, with no
// resolver (an AVX-512 small::block_binary ran on an AVX2 machine: SIGILL), and gave the
// resolvers of inline ones a strong symbol in every file that built them, so a clang
// build (the fuzz build, tests/fuzz/run.sh) runs the baseline version, which has the
// same bits. The width builds below, each a function for one target, work with both.
#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 14 : __GNUC__ >= 6) && !defined(__CUDACC__)
#define DL_WIDTH_BUILDS 1
#define DL_TARGET_AVX512 __attribute__((target("avx512f")))
#define DL_TARGET_AVX2 __attribute__((target("avx2")))
#endif
#if defined(DL_WIDTH_BUILDS) && !defined(__clang__)
#define DL_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DL_TARGET_CLONES
#endif

namespace dl::cpu {

// Note [Builds for each vector width]
// Code written with GCC's vector types (__attribute__((vector_size))) has the width it
// was written with in every clone, and a 64-byte vector in a clone without AVX-512 is
// lowered through the stack, its pieces moved by general registers: the fused programs'
// interpreter and rows_dot ran several times slower on an AVX2 machine than their
// arithmetic needs (docs/performance-compile.md, and docs/performance.md's `gemv` row).
// Such code is a template on the width in bytes instead, built for each width in a function marked
// DL_TARGET_AVX512 (64), DL_TARGET_AVX2 (32) or for the baseline (16), where
// DL_WIDTH_BUILDS is defined (x86-64; elsewhere the baseline alone), and the caller runs
// the build that vector_bytes() names: the widest this CPU has, or less when a test
// asked for less (limit_vector_bytes) to check that every build gives the same bits.
// Each build rounds every element as the others (no fused multiply-adds, as for the
// clones above).
int vector_bytes();
void limit_vector_bytes(int bytes);   // 16, 32 or 64; 0 lifts the limit

constexpr int64_t kParallelGrain = int64_t(1) << 18;

template <int N>
struct StridedOperands {
  std::array<char*, N> data;
  std::array<std::array<int64_t, kMaxDims>, N> strides;  // in bytes
  std::array<int64_t, kMaxDims> sizes;
  int ndim = 0;
  int64_t numel = 1;
};

// Builds the operand geometry for out and inputs broadcast to out.shape(), coalescing
// adjacent dims that can be walked as one (tensor/geometry.h, as the CUDA plugin's).
template <int N>
StridedOperands<N> make_operands(const std::array<const Tensor*, N>& ts) {
  StridedOperands<N> g;
  geometry::coalesce<N>(ts, g);
  return g;
}

// Calls body(ptrs, inner_strides, n) for runs of the innermost dim, covering the linear
// range [begin, end) of the (coalesced) iteration space.
template <int N, typename Body>
void for_each_run(const StridedOperands<N>& g, int64_t begin, int64_t end, Body&& body) {
  if (g.ndim == 0) {
    if (begin < end) {
      std::array<int64_t, N> zs{};
      body(g.data, zs, int64_t(1));
    }
    return;
  }
  const int last = g.ndim - 1;
  const int64_t inner = g.sizes[last];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = g.strides[k][last];
  // Multi-index of `begin`.
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % g.sizes[d];
    rem /= g.sizes[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    std::array<char*, N> p = g.data;
    for (int d = 0; d < g.ndim; ++d)
      for (int k = 0; k < N; ++k) p[k] += idx[d] * g.strides[k][d];
    int64_t n = inner - idx[last];
    if (n > end - pos) n = end - pos;
    body(p, inner_strides, n);
    pos += n;
    idx[last] += n;
    for (int d = last; d > 0 && idx[d] >= g.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b near 2^63.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// d[0, n) = s[0, n) for short runs (an image row): blocks of a constant size, which the
// compiler turns into a few vector moves, the last one overlapping the one before (a
// memcpy call per row of 26 pixels cost more than the copy). d and s do not overlap.
template <typename T>
inline void copy_run(T* d, const T* s, int64_t n) {
  constexpr int64_t kBlock = 32 / sizeof(T);
  if (n < kBlock) {
    std::memcpy(d, s, size_t(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i + kBlock <= n; i += kBlock) std::memcpy(d + i, s + i, sizeof(T) * kBlock);
  std::memcpy(d + n - kBlock, s + n - kBlock, sizeof(T) * kBlock);
}

// Thread t's share [b, e) of [0, n) cut into nt chunks (empty when b >= e). Written so
// that nothing overflows for n near 2^63: a broadcast (expanded) tensor may have that
// many elements and still be read, or written by an in-place op.
struct Chunk {
  int64_t b, e;
};
inline Chunk chunk_of(int64_t n, int nt, int t) {
  const int64_t chunk = ceil_div(n, nt);
  const int64_t b = int64_t(t) * chunk;
  return {b, n - b > chunk ? b + chunk : n};
}

// This thread's team size and place in it (1 and 0 outside a parallel region).
struct TeamPlace {
  int size, index;
};
inline TeamPlace team_place() {
#ifdef _OPENMP
  return {omp_get_num_threads(), omp_get_thread_num()};
#else
  return {1, 0};
#endif
}

// A monotonic clock in nanoseconds.
inline int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Where a RegionThrottle times a region (Note [Throttling parallel regions under
// contention]), the time the thread that started it spends in its own parts: the
// parallel helpers below add to it on that thread alone (null elsewhere).
inline thread_local int64_t* t_own_part_ns = nullptr;

template <typename F>
[[gnu::always_inline]] inline void run_part(F&& f) {
  if (int64_t* own = t_own_part_ns) {
    const int64_t t0 = monotonic_ns();
    f();
    *own += monotonic_ns() - t0;
  } else {
    f();
  }
}

// Runs run(begin, end, thread) over [0, n) units, split into one contiguous range per
// OpenMP thread when the whole job (`work`, roughly the elements touched; a double, as an
// estimate from a caller's geometry such as a pool's window can pass 2^63) is worth
// waking them for; `thread` is below max_threads(). Nothing inside may throw.
template <typename Run>
void parallel_units(int64_t n, double work, Run&& run) {
  if (n < 2 || work < kParallelGrain) {
    run_part([&] { run(int64_t(0), n, 0); });
    return;
  }
#pragma omp parallel
  {
    const TeamPlace place = team_place();
    const Chunk c = chunk_of(n, place.size, place.index);
    if (c.b < c.e) run_part([&] { run(c.b, c.e, place.index); });
  }
}

// Runs run(begin, end) over [0, n) cut into exactly `parts` chunks (chunk_of), the
// chunks shared out between the OpenMP threads (parallel_parts) or run in order on this
// one (serial_parts). The cut is the same either way, so work whose arithmetic depends
// on it (a BLAS call per chunk) gives the same bits however many threads ran it.
template <typename Run>
void parallel_parts(int64_t n, int parts, Run&& run) {
#pragma omp parallel
  {
    const auto [nt, t] = team_place();
    for (int p = t; p < parts; p += nt) {
      const Chunk c = chunk_of(n, parts, p);
      if (c.b < c.e) run_part([&] { run(c.b, c.e); });
    }
  }
}
template <typename Run>
void serial_parts(int64_t n, int parts, Run&& run) {
  for (int p = 0; p < parts; ++p) {
    const Chunk c = chunk_of(n, parts, p);
    if (c.b < c.e) run(c.b, c.e);
  }
}

// Note [Throttling parallel regions under contention]
// A parallel region ends when every thread of the team has run its part, so when
// another process holds one of the cores, a region waits for a scheduler time slice
// (milliseconds) whatever its size. Where regions are frequent and short, a caller can
// time them with a RegionThrottle: two regions in a row that were slow turn the
// splitting off for kBackoffNs, after which the next regions probe again. (One alone
// does not: even on a quiet machine the first region after a long serial stretch can
// wait milliseconds for a parked thread.) A region is slow when it took more than
// kSlowFactor times the fastest time per unit of work seen so far, and the thread that
// started it spent more of that time waiting for the others than in its own parts
// (run_part above times those). The second condition is what tells contention from a
// region that is slow on every thread: the first products into fresh result memory
// take page faults on both threads (several times the best time, for the first dozens
// of 256 x 784 products of a process), and by the first condition alone turned
// splitting off for a second at the start of a run, or half the runs of a 0.2 s
// benchmark sample (docs/performance.md, "Small products of matrices"). A thread
// preempted while it runs its own part is not seen as waiting, so contention is seen in
// about half the regions it slows: still within a few regions. On a quiet machine the
// throttle costs two clock reads a region; under contention, a few slow regions a
// second. (Races between threads only blur the record.)
class RegionThrottle {
 public:
  static constexpr double kSlowFactor = 3.0;
  static constexpr int64_t kBackoffNs = 1000000000;  // 1 s

  bool allowed(int64_t now_ns) const { return now_ns >= off_until_.load(std::memory_order_relaxed); }
  // Runs a parallel region that does `work` units, and records its time.
  template <typename F>
  void timed(double work, F&& region);
  // A region that did `work` units in `took_ns`, `own_ns` of them in the starting
  // thread's own parts, ending at now_ns.
  void record(double work, int64_t took_ns, int64_t own_ns, int64_t now_ns) {
    const double per = double(took_ns) / work;
    const double best = best_.load(std::memory_order_relaxed);
    if (per < best) best_.store(per, std::memory_order_relaxed);
    if (per <= kSlowFactor * best || took_ns - own_ns <= own_ns) {
      slow_in_a_row_.store(0, std::memory_order_relaxed);
    } else if (slow_in_a_row_.fetch_add(1, std::memory_order_relaxed) + 1 >= 2) {
      slow_in_a_row_.store(0, std::memory_order_relaxed);
      off_until_.store(now_ns + kBackoffNs, std::memory_order_relaxed);
    }
  }

 private:
  std::atomic<double> best_{1e300};
  std::atomic<int> slow_in_a_row_{0};
  std::atomic<int64_t> off_until_{0};
};

template <typename F>
void RegionThrottle::timed(double work, F&& region) {
  int64_t own = 0;
  int64_t* const outer = t_own_part_ns;
  t_own_part_ns = &own;
  const int64_t t0 = monotonic_ns();
  region();
  const int64_t t1 = monotonic_ns();
  t_own_part_ns = outer;
  record(work, t1 - t0, own, t1);
}

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Runs `run(begin, end)` over [0, n): in parallel chunks from `grain` elements up (a
// finer grain than kParallelGrain's) while `throttle` allows, timing each region (Note
// [Throttling parallel regions under contention]); on one thread otherwise.
template <typename Run>
void parallel_range_throttled(RegionThrottle& throttle, int64_t n, int64_t grain, Run&& run) {
  bool split = n >= grain && n >= 2 && max_threads() > 1;
#ifdef _OPENMP
  split = split && !omp_in_parallel();
#endif
  if (!split || !throttle.allowed(monotonic_ns())) {
    run(int64_t(0), n);
    return;
  }
  throttle.timed(double(n), [&] {
    parallel_units(n, double(kParallelGrain), [&](int64_t b, int64_t e, int) { run(b, e); });
  });
}

// Runs `run(begin, end)` over [0, n), in parallel chunks when n is large.
template <typename Run>
void parallel_range(int64_t n, Run&& run) {
  parallel_units(n, double(n), [&](int64_t b, int64_t e, int) { run(b, e); });
}

// out[i] = f(in1[i], ..., inN-1[i]) with out of type Out and inputs of type In
// (for N == 4, the first input is bool: the shape of where()).
template <typename Out, typename In, int N, typename F>
void elementwise(const std::array<const Tensor*, N>& ts, F f) {
  static_assert(N >= 1 && N <= 4);
  // Dense bool inputs are read as bytes and converted: GCC's vectoriser has no vector
  // type for a bool load and left such loops scalar, several times slower
  // (docs/performance.md, "Measurements behind the code"). (Casts from bool convert in
  // the same expression as the load: tensor/cpu/pointwise.cpp's copy.)
  using Load = std::conditional_t<std::is_same_v<In, bool>, uint8_t, In>;
  StridedOperands<N> g = make_operands<N>(ts);
  if (g.numel == 0) return;
  auto run = [&](int64_t b, int64_t e) {
    for_each_run<N>(g, b, e, [&](const std::array<char*, N>& p, const std::array<int64_t, N>& s,
                                 int64_t n) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      bool contig = s[0] == int64_t(sizeof(Out));
      for (int k = 1; k < N; ++k) contig = contig && s[k] == int64_t(sizeof(In));
      if constexpr (N == 1) {
        for (int64_t i = 0; i < n; ++i) o[i * s[0] / int64_t(sizeof(Out))] = f();
      } else if constexpr (N == 2) {
        const Load* a = reinterpret_cast<const Load*>(p[1]);
        if (contig) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(In(a[i]));
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
        }
      } else if constexpr (N == 3) {
        const Load* a = reinterpret_cast<const Load*>(p[1]);
        const Load* b2 = reinterpret_cast<const Load*>(p[2]);
        if (contig) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(In(a[i]), In(b2[i]));
        } else if (s[0] == int64_t(sizeof(Out)) && s[1] == int64_t(sizeof(In)) && s[2] == 0) {
          const In bv = In(*b2);
          for (int64_t i = 0; i < n; ++i) o[i] = f(In(a[i]), bv);
        } else if (s[0] == int64_t(sizeof(Out)) && s[1] == 0 && s[2] == int64_t(sizeof(In))) {
          const In av = In(*a);
          for (int64_t i = 0; i < n; ++i) o[i] = f(av, In(b2[i]));
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const In*>(p[1] + i * s[1]),
                  *reinterpret_cast<const In*>(p[2] + i * s[2]));
        }
      } else {  // where-shaped: a bool condition, then two In operands
        // Dense runs, with either value operand possibly one broadcast number (as
        // masked_fill's, and so ReLU's gradient, is): loops the compiler vectorises. The
        // condition is read as bytes: GCC's vectoriser has no vector type for a bool
        // load, and left these loops scalar (masked_fill took several times an add's
        // time: docs/performance.md, "Measurements behind the code").
        const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);
        const In* a = reinterpret_cast<const In*>(p[2]);
        const In* b2 = reinterpret_cast<const In*>(p[3]);
        const int64_t z = int64_t(sizeof(In));
        const bool dense = s[0] == int64_t(sizeof(Out)) && s[1] == int64_t(sizeof(bool));
        if (dense && s[2] == z && s[3] == z) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(c[i] != 0, a[i], b2[i]);
        } else if (dense && s[2] == 0 && s[3] == z) {
          const In av = *a;
          for (int64_t i = 0; i < n; ++i) o[i] = f(c[i] != 0, av, b2[i]);
        } else if (dense && s[2] == z && s[3] == 0) {
          const In bv = *b2;
          for (int64_t i = 0; i < n; ++i) o[i] = f(c[i] != 0, a[i], bv);
        } else if (dense && s[2] == 0 && s[3] == 0) {  // e.g. masked_fill of an expanded tensor
          const In av = *a, bv = *b2;
          for (int64_t i = 0; i < n; ++i) o[i] = f(c[i] != 0, av, bv);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const bool*>(p[1] + i * s[1]),
                  *reinterpret_cast<const In*>(p[2] + i * s[2]),
                  *reinterpret_cast<const In*>(p[3] + i * s[3]));
        }
      }
    });
  };
  parallel_range(g.numel, run);
}

}  // namespace dl::cpu
