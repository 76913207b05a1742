// Folds of a contiguous (or strided) run of elements in kLanes independent
// accumulators: the reductions' rows path (tensor/cpu/reduce.cpp, Note [Reduction order
// and determinism]) and the normalisations' statistics (tensor/cpu/norm.cpp) use the
// same ones, with the reducers of tensor/reduce_functors.h.
#pragma once
#include <cstdint>

#include "tensor/cpu/loops.h"

namespace dl::cpu {

// Independent accumulators of a row fold. 32 keeps the lane loop a real loop for GCC's
// loop vectoriser; with 8 or 16 it is unrolled and left to the SLP vectoriser, which
// gives up on the selects of amax/amin (measured several times slower:
// docs/performance.md, "Measurements behind the code").
constexpr int kLanes = 32;

// kLanes accumulators, fed element i of a run into lane i % kLanes (a run's remainder
// too, so short runs vectorise as well), merged pairwise at the end.
template <typename R>
struct Lanes {
  using A = typename R::acc_t;
  A lane[kLanes];

  explicit Lanes(const R& r) {
    for (int k = 0; k < kLanes; ++k) lane[k] = r.identity();
  }
  // Compiled for AVX-512 and AVX2 too (the baseline x86-64 build has only SSE2), picked
  // when the library loads: 8 or 4 doubles a vector instead of 2. Each lane still folds
  // its elements in the same order, and nothing is fused into a multiply-add
  // (DL_TARGET_CLONES), so every version gives the same bits.
  using T = typename R::in_t;   // (a member template could not be multiversioned by clang)
  DL_TARGET_CLONES void add(const R& r, const T* p, int64_t n, int64_t s, double c) {
    int64_t i = 0;
    if (s == 1) {
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lane[k] = r.step(lane[k], p[i + k], c);
      for (int64_t k = 0; k < n - i; ++k) lane[k] = r.step(lane[k], p[i + k], c);
    } else {
      for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lane[k] = r.step(lane[k], p[(i + k) * s], c);
      for (int64_t k = 0; k < n - i; ++k) lane[k] = r.step(lane[k], p[(i + k) * s], c);
    }
  }
  A result(const R& r) {
    for (int width = kLanes / 2; width > 0; width /= 2)
      for (int k = 0; k < width; ++k) lane[k] = r.merge(lane[k], lane[k + width]);
    return lane[0];
  }
};

// Folds n elements p[0], p[s], ...; a short run simply in order.
template <typename R, typename T>
typename R::acc_t fold_run(const R& r, const T* p, int64_t n, int64_t s, double c) {
  if (n < kLanes) {
    typename R::acc_t a = r.identity();
    for (int64_t i = 0; i < n; ++i) a = r.step(a, p[i * s], c);
    return a;
  }
  Lanes<R> l(r);
  l.add(r, p, n, s, c);
  return l.result(r);
}

}  // namespace dl::cpu
